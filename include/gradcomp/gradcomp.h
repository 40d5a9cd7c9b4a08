/* gradcomp public C API for tools and tests: a communicator from the standalone
 * bootstrap, and allreduce with an algorithm config. Installed programs link
 * libgradcomp-api.so (pkg-config gradcomp, or CMake find_package(gradcomp) and
 * gradcomp::api), which exports only these gc* functions. Not exported from
 * libgradcomp.so (which exports only NCCL entry points and ncclNetPlugin_v*);
 * in-tree tools link the internal library statically.
 *
 * All calls are blocking. A communicator runs on the backend GRADCOMP_API_BACKEND
 * names: the CPU reference (cpu, the default: host memory is device memory), or
 * cpu-device, the CPU reference with a GPU's memory discipline, whose device
 * memory host code must not touch: there the buffers of gcAllreduce come from
 * gcMemAlloc and move with gcMemcpyToDevice / gcMemcpyToHost. Errors return a
 * gcResult_t; gcLastError() gives the one-line message of the calling thread's
 * last failure (it names the variable, argument or peer at fault). */
#ifndef GRADCOMP_GRADCOMP_H_
#define GRADCOMP_GRADCOMP_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exportable from a shared library; each library's version script decides. */
#if defined(__GNUC__)
#define GC_API __attribute__((visibility("default")))
#else
#define GC_API
#endif

typedef enum {
  gcSuccess = 0,
  gcInvalidArgument = 1,
  gcInvalidConfig = 2,
  gcSystemError = 3,
  gcRemoteError = 4,
  gcTimeout = 5,
  gcUnsupported = 6,
  gcInternalError = 7,
} gcResult_t;

/* Values equal ncclDataType_t / ncclRedOp_t. */
typedef enum {
  gcInt32 = 2,
  gcInt64 = 4,
  gcFloat16 = 6,
  gcFloat32 = 7,
  gcFloat64 = 8,
  gcBfloat16 = 9,
} gcDataType_t;
typedef enum { gcSum = 0, gcAvg = 4 } gcRedOp_t;

typedef struct gcComm* gcComm_t;
typedef struct gcAlgoConfig* gcAlgoConfig_t;

typedef struct {
  uint64_t bytesSent, bytesRecv, msgsSent, msgsRecv;
} gcTraffic_t;

/* Host <-> device bytes the communicator's backend moved (payloads written
 * to and read from host memory, scalar results read back), its host
 * synchronizations and primitives (zero on the cpu backend). */
typedef struct {
  uint64_t d2hBytes, h2dBytes, syncs, primitives;
} gcDeviceTraffic_t;

/* Collective: rank, size and rendezvous from the environment (GRADCOMP_RANK /
 * GRADCOMP_NRANKS or a launcher's variables, GRADCOMP_BOOTSTRAP or
 * MASTER_ADDR:MASTER_PORT), then UCX endpoints to every peer. */
GC_API gcResult_t gcCommInitFromEnv(gcComm_t* comm);
/* A rendezvous without environment variables, NCCL-style, for clients that
 * have their own key-value store (the PyTorch hook: python/gradcomp/torch.py).
 * Rank 0 calls gcGetUniqueId, which opens a listener on `host` (a local
 * address or name the other ranks can reach; NULL: 127.0.0.1) at a port the
 * kernel picks and writes "host:port" (text, NUL-terminated) into id; the id
 * reaches every rank by the client's means; then all ranks call
 * gcCommInitRank with it (collective; rank 0 in the process that made the
 * id, else rank 0 listens at the id's host:port itself). GRADCOMP_RANK,
 * GRADCOMP_NRANKS and GRADCOMP_BOOTSTRAP are not read; every other
 * GRADCOMP_* variable is, as for gcCommInitFromEnv. */
#define GC_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[GC_UNIQUE_ID_BYTES];
} gcUniqueId;
GC_API gcResult_t gcGetUniqueId(const char* host, gcUniqueId* id);
GC_API gcResult_t gcCommInitRank(gcComm_t* comm, int nranks, const gcUniqueId* id, int rank);
GC_API int gcCommRank(gcComm_t comm);
GC_API int gcCommSize(gcComm_t comm);
GC_API gcResult_t gcCommDestroy(gcComm_t comm);

/* An algorithm by registry name ("dense", ...) with parameter overrides by
 * registry name without prefix ("DENSITY" -> GRADCOMP_DENSITY); unset
 * parameters come from the environment, then defaults. Values are validated. */
GC_API gcResult_t gcAlgoConfigCreate(const char* algo, gcAlgoConfig_t* config);
GC_API gcResult_t gcAlgoConfigSet(gcAlgoConfig_t config, const char* param, const char* value);
GC_API void gcAlgoConfigDestroy(gcAlgoConfig_t config);
/* Comma-separated names of the registered algorithms. */
GC_API const char* gcAlgorithmNames(void);

/* Device memory of comm's backend for a call's buffers (64-byte aligned). */
GC_API gcResult_t gcMemAlloc(gcComm_t comm, size_t bytes, void** ptr);
GC_API gcResult_t gcMemFree(gcComm_t comm, void* ptr, size_t bytes);
/* Blocking copies between host memory (any) and gcMemAlloc memory. */
GC_API gcResult_t gcMemcpyToDevice(gcComm_t comm, void* dst, const void* src, size_t bytes);
GC_API gcResult_t gcMemcpyToHost(gcComm_t comm, void* dst, const void* src, size_t bytes);

/* Collective allreduce on the backend's device memory (host memory on the
 * cpu backend); sendbuf == recvbuf is in place.
 * bufferKey identifies the logical tensor across calls (error-feedback
 * residuals, thresholds, call counts) and must be equal on all ranks; 0 = no
 * key: state that steers the schedule is then shared by calls of the same
 * count, dtype and op, and residuals are kept per recvbuf address. */
GC_API gcResult_t gcAllreduce(const void* sendbuf, void* recvbuf, size_t count, gcDataType_t dtype,
                              gcRedOp_t op, gcAlgoConfig_t config, uint64_t bufferKey,
                              gcComm_t comm);

/* Reduce-scatter in NCCL's layout: sendbuf holds recvcount x gcCommSize
 * elements, rank r's recvbuf gets elements [r*recvcount, (r+1)*recvcount)
 * of the reduction (config's algorithm must have a reduce-scatter form,
 * else gcUnsupported; NULL: dense). In place when recvbuf = sendbuf +
 * r*recvcount elements; any other overlap is gcInvalidArgument. Error
 * feedback keeps a residual of the whole input per bufferKey (0: per
 * sendbuf address). Collective: every rank calls with the same recvcount,
 * dtype, op, config and bufferKey. */
GC_API gcResult_t gcReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                  gcDataType_t dtype, gcRedOp_t op, gcAlgoConfig_t config,
                                  uint64_t bufferKey, gcComm_t comm);

/* Allgather in NCCL's layout: every rank's recvbuf gets sendcount x
 * gcCommSize elements, rank r's sendbuf at [r*sendcount, (r+1)*sendcount).
 * config names dense (NULL), cast (bfloat16 on the wire) or blockq (int8 /
 * int4 block quantization: BITS, AG_BLOCK); lossy ones deliver
 * decode(encode(shard)) to every rank, the owner included, so all ranks hold
 * identical bytes. In place when sendbuf = recvbuf + r*sendcount elements;
 * any other overlap is gcInvalidArgument. Floating dtypes (dense: any).
 * Collective: every rank calls with the same sendcount, dtype and config
 * (a differing sendcount is an error on every rank naming the counts). */
GC_API gcResult_t gcAllgather(const void* sendbuf, void* recvbuf, size_t sendcount,
                              gcDataType_t dtype, gcAlgoConfig_t config, gcComm_t comm);

/* What the NCCL interposer would do with an allreduce of count x dtype with
 * op, from the same configuration (defaults, the admin file: GRADCOMP_CONFIG,
 * else /etc/gradcomp.conf; GRADCOMP_* variables; docs/usage.md): *config gets
 * the algorithm and parameters of the matching rule (free it with
 * gcAlgoConfigDestroy), or NULL when the call would pass through; *why (may
 * be NULL) is the verdict's name ("compress", "algorithm off", "below
 * GRADCOMP_MIN_BYTES", "data type not f32/f16/bf16", ...; static storage).
 * Rules select communicators as the interposer's do, with this one as index
 * 0, unnamed, of gcCommSize ranks. The first call on comm is collective: it
 * reads the configuration and compares it across ranks, and a difference
 * fails every rank with gcInvalidConfig naming the first differing key. */
GC_API gcResult_t gcCommPolicyConfig(gcComm_t comm, size_t count, gcDataType_t dtype,
                                     gcRedOp_t op, gcAlgoConfig_t* config, const char** why);

/* The algorithm comm's last successful gcAllreduce ran: the configured one,
 * or for "auto" the candidate it chose (e.g. "qsgd:BITS=4"; "dense(flush)"
 * for the dense call that sent and cleared a compressor's error-feedback
 * residual); "" before the first call. The string stays valid until the next
 * gcAllreduce on comm. */
GC_API const char* gcCommLastAlgorithm(gcComm_t comm);

/* Bytes and messages this rank sent/received on comm since the last reset. */
GC_API gcResult_t gcCommGetTraffic(gcComm_t comm, gcTraffic_t* traffic);
/* Host <-> device traffic of comm's backend since the last reset. */
GC_API gcResult_t gcCommGetDeviceTraffic(gcComm_t comm, gcDeviceTraffic_t* traffic);
/* Resets both counters. */
GC_API gcResult_t gcCommResetTraffic(gcComm_t comm);

/* Host topology of comm, agreed by every rank at init (GRADCOMP_HOSTID,
 * GRADCOMP_HIERARCHY): number of hosts, this rank's host index, local rank
 * and local size, and whether algorithms run hierarchically (dense inside a
 * host, the algorithm across hosts; 0: flat over all ranks). */
typedef struct {
  int hosts, host, localRank, localSize, hierarchical;
} gcTopology_t;
GC_API gcResult_t gcCommGetTopology(gcComm_t comm, gcTopology_t* topology);
/* Host index of `rank` on comm (the same on every rank); -1 when comm or
 * rank is invalid. */
GC_API int gcCommRankHost(gcComm_t comm, int rank);
/* gcCommGetTraffic counting only peers on other hosts than this rank's. */
GC_API gcResult_t gcCommGetInterHostTraffic(gcComm_t comm, gcTraffic_t* traffic);

GC_API const char* gcResultString(gcResult_t result);
GC_API const char* gcLastError(void);

#ifdef __cplusplus
}
#endif
#endif /* GRADCOMP_GRADCOMP_H_ */
