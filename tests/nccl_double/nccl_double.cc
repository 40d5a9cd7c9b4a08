// Test-double libnccl.so.2; see nccl_double.h. Like the real library it
// defines pnccl* and exports nccl* as weak aliases of them.
#include "nccl_double.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

struct ncclComm {
  uint64_t id;
  int rank, nranks;
  uint64_t seq = 0;   // collectives issued, names the exchange files
  uint64_t splits = 0;
};

namespace {

std::mutex gMu;
std::map<std::string, int> gCounts;
std::vector<ncclDoubleAllReduceRecord> gAllReduces;
int gGroupDepth = 0;

void record(const char* fn) {
  std::lock_guard<std::mutex> lock(gMu);
  gCounts[fn]++;
}

uint64_t hashBytes(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Every rank's `bytes` of `in` into out[rank * bytes], through files.
ncclResult_t fileAllGather(ncclComm* comm, const void* in, size_t bytes, void* out) {
  const char* dir = getenv("NCCL_DOUBLE_DIR");
  if (dir == nullptr) return ncclSystemError;
  uint64_t seq = comm->seq++;
  auto name = [&](int r) {
    std::ostringstream os;
    os << dir << "/g-" << std::hex << comm->id << std::dec << "-" << seq << "-" << r;
    return os.str();
  };
  std::string mine = name(comm->rank), tmp = mine + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(static_cast<const char*>(in), std::streamsize(bytes));
    if (!f.good()) return ncclSystemError;
  }
  if (rename(tmp.c_str(), mine.c_str()) != 0) return ncclSystemError;
  double timeoutS = getenv("NCCL_DOUBLE_TIMEOUT_S") ? atof(getenv("NCCL_DOUBLE_TIMEOUT_S")) : 30;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutS);
  for (int r = 0; r < comm->nranks; ++r) {
    std::string path = name(r);
    struct stat st;
    while (stat(path.c_str(), &st) != 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        fprintf(stderr, "nccl_double: rank %d never wrote %s\n", r, path.c_str());
        return ncclSystemError;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::ifstream f(path, std::ios::binary);
    f.read(static_cast<char*>(out) + size_t(r) * bytes, std::streamsize(bytes));
    if (size_t(f.gcount()) != bytes) return ncclSystemError;
  }
  return ncclSuccess;
}

size_t dtypeSize(int t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

ncclResult_t newComm(ncclComm_t* out, uint64_t id, int rank, int nranks) {
  if (out == nullptr || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  *out = new ncclComm{id, rank, nranks};
  return ncclSuccess;
}

}  // namespace

#define DOUBLE_API extern "C" __attribute__((visibility("default")))
#define WEAK_ALIAS(name) DOUBLE_API __attribute__((weak, alias("p" #name)))

DOUBLE_API int ncclDoubleCount(const char* fn) {
  std::lock_guard<std::mutex> lock(gMu);
  auto it = gCounts.find(fn);
  return it == gCounts.end() ? 0 : it->second;
}

DOUBLE_API int ncclDoubleAllReduceAt(int i, ncclDoubleAllReduceRecord* out) {
  std::lock_guard<std::mutex> lock(gMu);
  if (i < 0 || size_t(i) >= gAllReduces.size()) return -1;
  *out = gAllReduces[size_t(i)];
  return 0;
}

DOUBLE_API ncclResult_t pncclGetVersion(int* version) {
  *version = 22809;
  return ncclSuccess;
}

DOUBLE_API ncclResult_t pncclGetUniqueId(ncclUniqueId* id) {
  record("ncclGetUniqueId");
  std::random_device rd;
  for (auto& c : id->internal) c = char(rd());
  return ncclSuccess;
}

DOUBLE_API ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  record("ncclCommInitRank");
  return newComm(comm, hashBytes(&id, sizeof id), rank, nranks);
}

DOUBLE_API ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                                int rank, ncclConfig_t*) {
  record("ncclCommInitRankConfig");
  return newComm(comm, hashBytes(&id, sizeof id), rank, nranks);
}

DOUBLE_API ncclResult_t pncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nId,
                                                  ncclUniqueId* ids, ncclConfig_t*) {
  record("ncclCommInitRankScalable");
  return newComm(comm, hashBytes(ids, sizeof(ncclUniqueId) * size_t(nId)), rank, nranks);
}

DOUBLE_API ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int*) {
  record("ncclCommInitAll");
  for (int i = 0; i < ndev; ++i) newComm(&comms[i], 0xa11 + uint64_t(ndev), i, ndev);
  return ncclSuccess;
}

DOUBLE_API ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                       ncclConfig_t*) {
  record("ncclCommSplit");
  int mine[2] = {color, key};
  std::vector<int> all(size_t(comm->nranks) * 2);
  ncclResult_t rc = fileAllGather(comm, mine, sizeof mine, all.data());
  if (rc != ncclSuccess) return rc;
  uint64_t split = comm->splits++;
  *newcomm = nullptr;
  if (color < 0) return ncclSuccess;  // NCCL_SPLIT_NOCOLOR
  int rank = 0, n = 0;
  for (int r = 0; r < comm->nranks; ++r) {
    if (all[size_t(r) * 2] != color) continue;
    ++n;
    int k = all[size_t(r) * 2 + 1];
    if (k < key || (k == key && r < comm->rank)) ++rank;
  }
  uint64_t id = hashBytes(&color, sizeof color, hashBytes(&split, sizeof split, comm->id));
  return newComm(newcomm, id, rank, n);
}

DOUBLE_API ncclResult_t pncclCommShrink(ncclComm_t comm, int* exclude, int nExclude,
                                        ncclComm_t* newcomm, ncclConfig_t*, int) {
  record("ncclCommShrink");
  int rank = 0, n = 0;
  for (int r = 0; r < comm->nranks; ++r) {
    bool out = false;
    for (int i = 0; i < nExclude; ++i) out = out || exclude[i] == r;
    if (out) {
      if (r == comm->rank) return ncclInvalidArgument;
      continue;
    }
    if (r < comm->rank) ++rank;
    ++n;
  }
  uint64_t split = comm->splits++;
  return newComm(newcomm, hashBytes(&split, sizeof split, comm->id ^ 0x5a), rank, n);
}

DOUBLE_API ncclResult_t pncclCommFinalize(ncclComm_t) { record("ncclCommFinalize"); return ncclSuccess; }
DOUBLE_API ncclResult_t pncclCommDestroy(ncclComm_t comm) { record("ncclCommDestroy"); delete comm; return ncclSuccess; }
DOUBLE_API ncclResult_t pncclCommAbort(ncclComm_t comm) { record("ncclCommAbort"); delete comm; return ncclSuccess; }

DOUBLE_API ncclResult_t pncclCommGetAsyncError(ncclComm_t, ncclResult_t* err) {
  record("ncclCommGetAsyncError");
  *err = ncclSuccess;
  return ncclSuccess;
}

DOUBLE_API const char* pncclGetLastError(ncclComm_t) { return "nccl_double: no error"; }
DOUBLE_API const char* pncclGetErrorString(ncclResult_t rc) { return rc == ncclSuccess ? "no error" : "nccl_double error"; }
DOUBLE_API ncclResult_t pncclCommCount(ncclComm_t comm, int* n) { *n = comm->nranks; return ncclSuccess; }
DOUBLE_API ncclResult_t pncclCommUserRank(ncclComm_t comm, int* r) { *r = comm->rank; return ncclSuccess; }
DOUBLE_API ncclResult_t pncclMemAlloc(void** p, size_t n) { *p = malloc(n ? n : 1); return ncclSuccess; }
DOUBLE_API ncclResult_t pncclMemFree(void* p) { free(p); return ncclSuccess; }

DOUBLE_API ncclResult_t pncclGroupStart() {
  record("ncclGroupStart");
  std::lock_guard<std::mutex> lock(gMu);
  ++gGroupDepth;
  return ncclSuccess;
}

DOUBLE_API ncclResult_t pncclGroupEnd() {
  record("ncclGroupEnd");
  std::lock_guard<std::mutex> lock(gMu);
  return gGroupDepth-- > 0 ? ncclSuccess : ncclInvalidUsage;
}

DOUBLE_API ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t dtype, ncclComm_t comm, cudaStream_t) {
  record("ncclAllGather");
  size_t bytes = count * dtypeSize(dtype);
  std::vector<char> in(static_cast<const char*>(sendbuff), static_cast<const char*>(sendbuff) + bytes);
  return fileAllGather(comm, in.data(), bytes, recvbuff);
}

// Real sums for float32/int32 (sum, avg); other types are recorded and
// their output is the input (the tests only check the arguments there).
DOUBLE_API ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t dtype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream) {
  record("ncclAllReduce");
  {
    std::lock_guard<std::mutex> lock(gMu);
    gAllReduces.push_back({sendbuff, recvbuff, count, int(dtype), int(op), comm, stream});
  }
  size_t bytes = count * dtypeSize(dtype);
  std::vector<char> all(bytes * size_t(comm->nranks));
  ncclResult_t rc = fileAllGather(comm, sendbuff, bytes, all.data());
  if (rc != ncclSuccess) return rc;
  if (dtype == ncclFloat32 && (op == ncclSum || op == ncclAvg)) {
    float* out = static_cast<float*>(recvbuff);
    for (size_t i = 0; i < count; ++i) {
      double s = 0;
      for (int r = 0; r < comm->nranks; ++r) s += reinterpret_cast<const float*>(&all[size_t(r) * bytes])[i];
      out[i] = float(op == ncclAvg ? s / comm->nranks : s);
    }
  } else if (dtype == ncclInt32 && op == ncclSum) {
    int32_t* out = static_cast<int32_t*>(recvbuff);
    for (size_t i = 0; i < count; ++i) {
      int64_t s = 0;
      for (int r = 0; r < comm->nranks; ++r) s += reinterpret_cast<const int32_t*>(&all[size_t(r) * bytes])[i];
      out[i] = int32_t(s);
    }
  } else if (sendbuff != recvbuff) {
    memmove(recvbuff, sendbuff, bytes);
  }
  return ncclSuccess;
}

// Real sums for float32 (sum, avg) and int32 (sum) in NCCL's layout: rank r gets elements
// [r * recvcount, (r + 1) * recvcount) of the reduction; other types get
// their own input slice (the tests only check the arguments there).
DOUBLE_API ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                           ncclDataType_t dtype, ncclRedOp_t op, ncclComm_t comm,
                                           cudaStream_t) {
  record("ncclReduceScatter");
  const size_t esz = dtypeSize(dtype), bytes = recvcount * esz * size_t(comm->nranks);
  std::vector<char> all(bytes * size_t(comm->nranks));
  ncclResult_t rc = fileAllGather(comm, sendbuff, bytes, all.data());
  if (rc != ncclSuccess) return rc;
  const size_t first = size_t(comm->rank) * recvcount;
  if (dtype == ncclFloat32 && (op == ncclSum || op == ncclAvg)) {
    float* out = static_cast<float*>(recvbuff);
    for (size_t i = 0; i < recvcount; ++i) {
      double s = 0;
      for (int r = 0; r < comm->nranks; ++r)
        s += reinterpret_cast<const float*>(&all[size_t(r) * bytes])[first + i];
      out[i] = float(op == ncclAvg ? s / comm->nranks : s);
    }
  } else if (dtype == ncclInt32 && op == ncclSum) {
    int32_t* out = static_cast<int32_t*>(recvbuff);
    for (size_t i = 0; i < recvcount; ++i) {
      int64_t s = 0;
      for (int r = 0; r < comm->nranks; ++r)
        s += reinterpret_cast<const int32_t*>(&all[size_t(r) * bytes])[first + i];
      out[i] = int32_t(s);
    }
  } else {
    memmove(recvbuff, &all[size_t(comm->rank) * bytes + first * esz], recvcount * esz);
  }
  return ncclSuccess;
}

WEAK_ALIAS(ncclGetVersion) ncclResult_t ncclGetVersion(int*);
WEAK_ALIAS(ncclGetUniqueId) ncclResult_t ncclGetUniqueId(ncclUniqueId*);
WEAK_ALIAS(ncclCommInitRank) ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int);
WEAK_ALIAS(ncclCommInitRankConfig) ncclResult_t ncclCommInitRankConfig(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
WEAK_ALIAS(ncclCommInitRankScalable) ncclResult_t ncclCommInitRankScalable(ncclComm_t*, int, int, int, ncclUniqueId*, ncclConfig_t*);
WEAK_ALIAS(ncclCommInitAll) ncclResult_t ncclCommInitAll(ncclComm_t*, int, const int*);
WEAK_ALIAS(ncclCommSplit) ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*);
WEAK_ALIAS(ncclCommShrink) ncclResult_t ncclCommShrink(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int);
WEAK_ALIAS(ncclCommFinalize) ncclResult_t ncclCommFinalize(ncclComm_t);
WEAK_ALIAS(ncclCommDestroy) ncclResult_t ncclCommDestroy(ncclComm_t);
WEAK_ALIAS(ncclCommAbort) ncclResult_t ncclCommAbort(ncclComm_t);
WEAK_ALIAS(ncclCommGetAsyncError) ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t*);
WEAK_ALIAS(ncclGetLastError) const char* ncclGetLastError(ncclComm_t);
WEAK_ALIAS(ncclGetErrorString) const char* ncclGetErrorString(ncclResult_t);
WEAK_ALIAS(ncclCommCount) ncclResult_t ncclCommCount(ncclComm_t, int*);
WEAK_ALIAS(ncclCommUserRank) ncclResult_t ncclCommUserRank(ncclComm_t, int*);
WEAK_ALIAS(ncclMemAlloc) ncclResult_t ncclMemAlloc(void**, size_t);
WEAK_ALIAS(ncclMemFree) ncclResult_t ncclMemFree(void*);
WEAK_ALIAS(ncclGroupStart) ncclResult_t ncclGroupStart();
WEAK_ALIAS(ncclGroupEnd) ncclResult_t ncclGroupEnd();
WEAK_ALIAS(ncclAllGather) ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
WEAK_ALIAS(ncclReduceScatter) ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
WEAK_ALIAS(ncclAllReduce) ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
