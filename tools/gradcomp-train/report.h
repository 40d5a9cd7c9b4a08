// What rank 0 prints per epoch and writes with -J: a JSON array with one object
// per epoch, fields epoch, train_loss, test_acc, wall_s, comm_s, wire_bytes,
// ag_comm_s, ag_wire_bytes, and with ZeRO-3 test_acc_master (tools/plot_train.py
// reads it).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "common/status.h"
#include "tools/gradcomp-train/flags.h"

namespace gradcomp::train {

class Report {
 public:
  Report(const Flags& flags, int nranks, size_t trainImages, size_t testImages);
  void printHeader(FILE* out) const;
  // Records the epoch and prints its line.
  void add(const EpochStats& st, FILE* out);
  // Writes every epoch recorded so far (the file is replaced atomically).
  Status writeJson(const std::string& path) const;

 private:
  const Flags& flags_;
  int nranks_;
  size_t trainImages_, testImages_;
  std::vector<EpochStats> epochs_;
};

}  // namespace gradcomp::train
