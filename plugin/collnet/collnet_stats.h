// What a CollNet group did, for a user to check that NCCL really called it
// and what compression achieved: one INFO line per group at closeColl, and
// with GRADCOMP_STATS=PREFIX a file PREFIX.collnet.<host>.<pid>.json with every
// group of the process (rewritten at each closeColl and at exit). Its own file
// name: CollNet runs where the interposer may not (a static NCCL), and
// gradcomp-launch reads PREFIX.rank*.json only.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace gradcomp::collnet {

struct GroupStats {
  uint64_t id = 0;      // creation order in this process
  int rank = -1, nranks = 0;
  std::string algo;
  uint64_t calls = 0;          // iallreduce chunks completed
  uint64_t logicalBytes = 0;   // count x dtype size, summed
  uint64_t wireBytes = 0;      // bytes this rank sent for them
  double seconds = 0;          // inside the algorithm
  double waitSeconds = 0;      // of which blocked on peers
  double wiringSeconds = 0;    // connect()
  uint64_t efReused = 0;       // chunks that added their key's residual
  uint64_t efRestarts = 0;     // keys whose slot changed: residual cleared first
  std::string failed;          // first error, empty when none
  bool closed = false;
};

std::string statsLine(const GroupStats& s);
std::string statsJson(const GroupStats& s);

// The process-wide record: update() replaces group s.id's entry; write()
// rewrites the file (no-op without GRADCOMP_STATS).
void update(const GroupStats& s);
Status write();

}  // namespace gradcomp::collnet
