#include "tools/gradcomp-train/report.h"

#include <cerrno>
#include <cmath>
#include <cstring>

namespace gradcomp::train {
namespace {

// JSON has no NaN/Infinity (a diverged run): write null.
std::string jsonNumber(double v, const char* format) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace

Report::Report(const Flags& flags, int nranks, size_t trainImages, size_t testImages)
    : flags_(flags), nranks_(nranks), trainImages_(trainImages), testImages_(testImages) {}

void Report::printHeader(FILE* out) const {
  const TrainOptions& t = flags_.train;
  std::fprintf(out,
               "# gradcomp-train: model %s, algo %s, %d ranks x batch %d, lr %g, momentum %g%s, "
               "bucket %g MiB, %s",
               t.model.c_str(), flags_.algo.c_str(), nranks_, t.batch, t.lr, t.momentum,
               t.momentumCorrection ? " (momentum correction)" : "", t.bucketMb,
               t.sharded ? "gradient reduce-scatter (sharded)"
               : t.average == AverageMode::Gradients ? "gradient allreduce" : "model averaging");
  if (t.average == AverageMode::Weights) std::fprintf(out, " every %d steps", t.period);
  if (t.straggleRanks > 0)
    std::fprintf(out, ", straggle %d ranks x %d ms", t.straggleRanks, t.straggleMs);
  for (const auto& [name, value] : flags_.algoParams)
    std::fprintf(out, ", %s=%s", name.c_str(), value.c_str());
  if (t.zero3) {
    std::fprintf(out, ", ZeRO-3 parameter allgather %s", flags_.agAlgo.c_str());
    for (const auto& [name, value] : flags_.agParams)
      std::fprintf(out, " %s=%s", name.c_str(), value.c_str());
  }
  std::fprintf(out, "\n# %zu train images (sharded), %zu test images, seed %llu\n", trainImages_,
               testImages_, static_cast<unsigned long long>(t.seed));
  std::fprintf(out, "# %5s %6s %10s %9s %9s %9s %12s%s\n", "epoch", "steps", "train_loss",
               "test_acc", "wall_s", "comm_s", "wire_MB",
               t.zero3 ? "    ag_comm_s     ag_wire_MB  master_acc" : "");
  std::fflush(out);
}

void Report::add(const EpochStats& st, FILE* out) {
  epochs_.push_back(st);
  std::fprintf(out, "  %5d %6d %10.4f %8.2f%% %9.2f %9.2f %12.2f", st.epoch, st.steps,
               st.trainLoss, st.testAcc * 100, st.wallS, st.commS, st.wireBytes / 1e6);
  if (flags_.train.zero3)
    std::fprintf(out, " %12.2f %14.2f %10.2f%%", st.agCommS, st.agWireBytes / 1e6,
                 st.testAccMaster * 100);
  std::fprintf(out, "\n");
  std::fflush(out);
}

Status Report::writeJson(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  GC_REQUIRE(f, Err::InvalidArgument, "-J %s: cannot write (%s)", path.c_str(), std::strerror(errno));
  std::fprintf(f, "[\n");
  for (size_t i = 0; i < epochs_.size(); ++i) {
    const EpochStats& e = epochs_[i];
    const std::string master =
        flags_.train.zero3 ? ", \"test_acc_master\": " + jsonNumber(e.testAccMaster, "%.6f") : "";
    std::fprintf(f,
                 "  {\"epoch\": %d, \"train_loss\": %s, \"test_acc\": %.6f, \"wall_s\": %.4f, "
                 "\"comm_s\": %.4f, \"wire_bytes\": %.0f, \"ag_comm_s\": %.4f, "
                 "\"ag_wire_bytes\": %.0f%s}%s\n",
                 e.epoch, jsonNumber(e.trainLoss, "%.6f").c_str(), e.testAcc, e.wallS, e.commS,
                 e.wireBytes, e.agCommS, e.agWireBytes, master.c_str(),
                 i + 1 < epochs_.size() ? "," : "");
  }
  std::fprintf(f, "]\n");
  const bool ok = std::fclose(f) == 0;
  GC_REQUIRE(ok && std::rename(tmp.c_str(), path.c_str()) == 0, Err::SystemError,
             "-J %s: write failed (%s)", path.c_str(), std::strerror(errno));
  return Status::Ok();
}

}  // namespace gradcomp::train
