// A small NCCL application for the launcher tests: linked against the
// test-double libnccl.so.2 like a real application is against NCCL (so
// LD_PRELOAD=libgradcomp.so interposes it), one rank per process. Rank and
// size from GRADCOMP_RANK/NRANKS (gradcomp-run), OMPI_COMM_WORLD_RANK/SIZE
// (mpirun) or RANK/WORLD_SIZE; the double exchanges through $NCCL_DOUBLE_DIR.
//
// Per rank, on one communicator (kCalls in tests/launch_check.py mirrors it):
//   3 x float32 sum of 4 MiB (one buffer) and 2 x 16 MiB (another): eligible
//   4 x float32 of 1 KiB: below GRADCOMP_MIN_BYTES=1M
//   2 x int32 of 4 MiB: data type not eligible
//   1 x float32 of 4 MiB inside ncclGroupStart/End
// Every result is checked (exit 3 on a wrong value). Options:
//   --exit-code N   exit with N after a clean run (the launcher preserves it)
//   --mismatch      rank 1 sets GRADCOMP_MIN_BYTES=2M: a configuration mismatch
//   --lossy         check only that calls succeed (for compressing algorithms)
//   --reduce-scatter  then 2 x float32 ncclReduceScatter of 4 MiB inputs
//                   (eligible) and 1 x int32 (not), sums checked
//   --allgather     then 2 x float32 ncclAllGather of 4 MiB outputs
//                   (eligible) and 1 x int32 (not); each shard is rank + 1,
//                   floats within int8 block quantization's half step of it
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "plugin/nccl/nccl_abi.h"

extern "C" {
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
}

namespace {

bool gExact = true;

int envInt(const char* a, const char* b, const char* c) {
  for (const char* name : {a, b, c})
    if (const char* v = getenv(name)) return atoi(v);
  return -1;
}

template <typename T>
bool reduceAndCheck(ncclComm_t comm, std::vector<T>& buf, ncclDataType_t type, int rank, int nranks) {
  for (T& x : buf) x = T(rank + 1);
  if (ncclAllReduce(buf.data(), buf.data(), buf.size(), type, ncclSum, comm, nullptr) != ncclSuccess)
    return false;
  if (!gExact) return true;
  const T want = T(nranks * (nranks + 1) / 2);
  for (size_t i = 0; i < buf.size(); i += 997)
    if (buf[i] != want) return false;
  return buf.back() == want;
}

// Input rank + 1 everywhere: every rank's shard sums to P(P+1)/2.
template <typename T>
bool scatterAndCheck(ncclComm_t comm, size_t inputElems, ncclDataType_t type, int rank,
                     int nranks) {
  const size_t recv = inputElems / size_t(nranks);
  std::vector<T> in(recv * size_t(nranks), T(rank + 1)), out(recv);
  if (ncclReduceScatter(in.data(), out.data(), recv, type, ncclSum, comm, nullptr) != ncclSuccess)
    return false;
  const T want = T(nranks * (nranks + 1) / 2);
  for (size_t i = 0; i < recv; i += 997)
    if (out[i] != want) return false;
  return out.back() == want;
}

// Shard r holds r + 1 everywhere; a lossy codec may move a float by half
// an int8 step of it ((r + 1) / 127 / 2), integers pass exactly.
template <typename T>
bool gatherAndCheck(ncclComm_t comm, size_t outputElems, ncclDataType_t type, int rank,
                    int nranks) {
  const size_t send = outputElems / size_t(nranks);
  std::vector<T> in(send, T(rank + 1)), out(send * size_t(nranks));
  if (ncclAllGather(in.data(), out.data(), send, type, comm, nullptr) != ncclSuccess) return false;
  if (!gExact) return true;
  for (size_t i = 0; i < out.size(); i += 997) {
    const double want = double(i / send + 1), tol = type == ncclInt32 ? 0 : want / 254 * 1.0001;
    if (double(out[i]) < want - tol || double(out[i]) > want + tol) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int exitCode = 0;
  bool mismatch = false, scatter = false, gather = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--exit-code") == 0 && i + 1 < argc) exitCode = atoi(argv[++i]);
    else if (strcmp(argv[i], "--mismatch") == 0) mismatch = true;
    else if (strcmp(argv[i], "--lossy") == 0) gExact = false;
    else if (strcmp(argv[i], "--reduce-scatter") == 0) scatter = true;
    else if (strcmp(argv[i], "--allgather") == 0) gather = true;
    else return fprintf(stderr, "nccl_app: unknown argument '%s'\n", argv[i]), 2;
  }
  const int rank = envInt("GRADCOMP_RANK", "OMPI_COMM_WORLD_RANK", "RANK");
  const int nranks = envInt("GRADCOMP_NRANKS", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE");
  if (rank < 0 || nranks < 1) return fprintf(stderr, "nccl_app: no rank/size in the environment\n"), 2;
  if (mismatch && rank == 1) setenv("GRADCOMP_MIN_BYTES", "2M", 1);
  ncclUniqueId id{};
  snprintf(id.internal, sizeof id.internal, "gradcomp-launch-test");
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess)
    return fprintf(stderr, "nccl_app: ncclCommInitRank failed\n"), 1;
  std::vector<float> four(1 << 20), sixteen(4 << 20), small(256);
  std::vector<int32_t> ints(1 << 20);
  bool ok = true;
  for (int i = 0; i < 3; ++i) ok = ok && reduceAndCheck(comm, four, ncclFloat32, rank, nranks);
  for (int i = 0; i < 2; ++i) ok = ok && reduceAndCheck(comm, sixteen, ncclFloat32, rank, nranks);
  for (int i = 0; i < 4; ++i) ok = ok && reduceAndCheck(comm, small, ncclFloat32, rank, nranks);
  for (int i = 0; i < 2; ++i) ok = ok && reduceAndCheck(comm, ints, ncclInt32, rank, nranks);
  ok = ok && ncclGroupStart() == ncclSuccess;
  ok = ok && reduceAndCheck(comm, four, ncclFloat32, rank, nranks);
  ok = ok && ncclGroupEnd() == ncclSuccess;
  for (int i = 0; scatter && i < 2; ++i)
    ok = ok && scatterAndCheck<float>(comm, 1 << 20, ncclFloat32, rank, nranks);
  if (scatter) ok = ok && scatterAndCheck<int32_t>(comm, 1 << 20, ncclInt32, rank, nranks);
  for (int i = 0; gather && i < 2; ++i)
    ok = ok && gatherAndCheck<float>(comm, 1 << 20, ncclFloat32, rank, nranks);
  if (gather) ok = ok && gatherAndCheck<int32_t>(comm, 1 << 20, ncclInt32, rank, nranks);
  if (ncclCommDestroy(comm) != ncclSuccess) ok = false;
  if (!ok) return fprintf(stderr, "nccl_app: rank %d: a collective failed or gave a wrong sum\n", rank), 3;
  printf("nccl_app: rank %d of %d: 12 allreduces checked\n", rank, nranks);
  return exitCode;
}
