// The one parameter registry. Every GRADCOMP_* variable is declared here, once:
//   X(NAME, Kind, default, constraint, help)
// Kind: Int/Double (constraint "lo..hi"), Size (bytes, K/M/G suffixes, "lo..hi"),
// Bool (0/1, on/off, true/false, yes/no), Enum (constraint "A|B|C"), String
// (free text; the consumer validates it and names the variable in its error).
// An empty default means "unset" (consumers must handle absence).
// docs/configuration.md is generated from this list (gradcomp-params --markdown);
// a test fails when the committed file is stale.
#pragma once

#define GRADCOMP_PARAM_LIST(X)                                                              \
  X(DEBUG, Enum, "WARN", "NONE|WARN|INFO|TRACE",                                            \
    "Log level, like NCCL_DEBUG. WARN prints problems only; INFO adds setup and per-communicator summaries; TRACE adds per-call detail.") \
  X(DEBUG_SUBSYS, String, "ALL", "",                                                        \
    "Comma-separated subsystems logged at INFO/TRACE: INIT, BOOTSTRAP, TRANSPORT, ALGO, DEVICE, PLUGIN, NET, PARAM, TOOL, ALL. A leading ^ excludes the listed ones.") \
  X(STRICT, Bool, "0", "",                                                                  \
    "Treat configuration problems as fatal instead of warning and running uncompressed.")  \
  X(TIMEOUT_S, Double, "60", "0.05..86400",                                                 \
    "Seconds a pending transfer may wait for a silent peer before the call fails with an error naming that peer.") \
  X(RANK, Int, "", "0..1048575",                                                            \
    "This process's rank for standalone runs (gradcomp-bench, gradcomp-train). Unset: the launcher's (torchrun RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, RANK; docs/usage.md).") \
  X(NRANKS, Int, "", "1..1048576",                                                          \
    "Number of ranks for standalone runs. Unset: the launcher's (torchrun WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS, WORLD_SIZE).") \
  X(BOOTSTRAP, String, "", "",                                                              \
    "host:port where rank 0 listens (UCX listener) for the standalone bootstrap. Unset: MASTER_ADDR:MASTER_PORT (the next port under torchrun), else derived from the launcher: 127.0.0.1 or the allocation's first host, a port from the job id.") \
  X(WAIT_SPIN_US, Int, "20", "0..1000000",                                                  \
    "Microseconds a wait busy-polls the network before it sleeps on the UCX event fd, so that more ranks than cores still make progress.") \
  X(API_BACKEND, Enum, "cpu", "cpu|cpu-device",                                            \
    "Backend of communicators made through gradcomp's C API (gradcomp-bench, gradcomp-train, tests): cpu, the CPU reference; cpu-device, the CPU reference with a GPU's memory discipline (device memory that faults when host code touches it, deferred primitives, host-device traffic counted): how CI proves the device-resident data path without a GPU.") \
  X(PROXY_CHECK, Enum, "auto", "auto|warn|error",                                          \
    "The proxy contract (docs/design.md): a compressed call that would grow the backend's memory or make an FFT plan while the caller's stream is parked on it. error: the call fails naming what it did; warn: logged, the call goes on (a later call of its shape reserves what it drew); auto: error on the cpu-device backend (CI), warn on a GPU.") \
  X(UCX_ERR_MODE, Enum, "AUTO", "AUTO|PEER|NONE",                                           \
    "UCX endpoint error handling. PEER detects a dead peer at once but UCX 1.13 then avoids shared memory (loopback TCP on one node); NONE allows shared memory, and a dead peer is caught by GRADCOMP_TIMEOUT_S. AUTO: NONE to peers on the same host (same boot id and network namespace), PEER to other hosts (NONE when no transport in UCX_TLS can do PEER).") \
  X(MONITOR, Bool, "1", "",                                                                \
    "Failure monitor: every rank keeps a TCP connection to rank 0, so a rank whose process dies is reported to all at once, and ranks agree on which rank failed when one stops. 0: off (a dead peer is then found by GRADCOMP_TIMEOUT_S).") \
  X(CALL_CHECK, Bool, "1", "",                                                             \
    "Each compressed collective sends its signature (call number, collective, count, dtype, op, algorithm and its parameters' values) to the other ranks ahead of its data (to its ring neighbour beyond 64 ranks) and checks theirs while it waits, so calls that disagree fail on every rank within milliseconds, naming each field that differs with its values by rank. 0: off (a disagreement then shows as an error deep in a schedule, or not at all).") \
  X(DENSE_RD_MAX_BYTES, Size, "64K", "0..1G",                                               \
    "Dense allreduce uses recursive doubling up to this many bytes per rank, the ring (reduce-scatter + allgather) above.") \
  X(HOSTID, String, "", "",                                                                 \
    "This rank's host identity, like NCCL_HOSTID: ranks with equal values are one host (their traffic stays dense under GRADCOMP_HIERARCHY). 1..128 printable characters, no spaces. Unset: hostname/boot id. Set on every rank or none: a mix is reported and the job runs flat.") \
  X(NET_BETWEEN_HOSTS, Bool, "1", "",                                                       \
    "1: peers on other hosts (GRADCOMP_HOSTID where set, else boot id and network namespace) are connected through their network-only UCX address, so their traffic never uses shared memory even where the kernel allows it (emulated hosts on one machine); peers on the same host get every transport UCX offers, shared memory first. Where UCX_TLS has no network transport the full address is used. 0: every peer's full address, UCX chooses.") \
  X(PLACEMENT, Enum, "auto", "auto|off",                                                     \
    "auto: with hwloc, when UCX_NET_DEVICES is unset and the NIC nearest this rank (its GPU's CPUs, else its CPU binding) is an RDMA device with an ACTIVE port, UCX's network devices are limited to it (logged at INFO); the CUDA executor's proxy thread is bound to the CPUs nearest its GPU, so the pinned buffers it allocates land on that NUMA node. off: neither (UCX and the OS decide).") \
  X(UCX_CUDA, Enum, "safe", "safe|asis",                                                    \
    "A UCX with CUDA modules (HPC-X, NVIDIA's images; Debian's has none): safe: gradcomp's UCX contexts get UCX_MEMTYPE_CACHE=n unless it is set (gradcomp hands UCX host memory only; the cache makes UCX patch libcuda's code, which UCX before 1.18.1 does wrongly on CUDA 12.9+ drivers), logged at INFO; a warning asks for UCX_MEM_CUDA_HOOK_MODE=reloc where the cache is on and UCX is older than 1.18.1. asis: UCX's own defaults.") \
  X(HIERARCHY, Enum, "auto", "auto|flat|host",                                             \
    "Schedule of compressed algorithms: host runs a dense reduce-scatter inside each host, the algorithm across hosts among the ranks with the same local rank (one rail each, on its 1/L shard) and a dense allgather inside the host (a reduce-scatter: a dense reduce-scatter inside each host, then the algorithm's reduce-scatter across hosts, on 1/L of the tensor; an allgather: the codec across hosts on each rail, then the rail's decoded shards dense inside the host); flat runs the algorithm over all ranks. auto: host when there is more than one host and more than one rank per host. A host map that is not uniform (uneven ranks per host, GRADCOMP_HOSTID on some ranks only, ranks asking for different modes) runs flat, with a message naming the problem.") \
  X(WAGMA_GROUP, Int, "0", "0..1048576",                                                    \
    "wagma: group size S, a power of two <= the largest power of two <= P. 0: sqrt(P) rounded up to a power of two.") \
  X(WAGMA_PERIOD, Int, "8", "1..1024",                                                      \
    "wagma: every PERIOD-th call of a buffer is a global (exact) average over all ranks; the calls between average within groups.") \
  X(WAGMA_WAIT, Bool, "0", "",                                                              \
    "wagma: 1 runs the blocking group allreduce (every group member waits for the others) instead of the wait-avoiding one.") \
  X(WAGMA_MODE, Enum, "weights", "weights|gradient",                                        \
    "wagma: weights (the caller averages model weights; exact WAGMA) or gradient (gradient-shadow: exact only for plain SGD with a constant learning rate).") \
  X(EF, Bool, "1", "",                                                                      \
    "Error feedback for compressing algorithms: keep what was not sent (the residual) per tensor and add it to the next call's input. off: no residuals.") \
  X(EF_DTYPE, Enum, "float", "float|bfloat16",                                              \
    "Element type of stored residuals. bfloat16 halves their memory at the cost of rounding the residual once per call.") \
  X(EF_MAX_MB, Int, "4096", "1..1048576",                                                   \
    "Cap on residual memory per communicator in MiB. Beyond it the least recently used tensors' residuals are retired; a tensor larger than the cap alone is an error.") \
  X(EF_RETIRE_CALLS, Int, "1000", "1..1000000000",                                          \
    "A residual whose tensor was not seen for this many collectives on the communicator is retired (frameworks rebuild buckets and reuse addresses).") \
  X(DENSITY, Double, "0.01", "0.000001..1",                                                 \
    "Sparse algorithms keep k = max(1, floor(DENSITY * count)) elements per call.")         \
  X(TOPK_TAU, Int, "64", "1..1000000",                                                      \
    "oktopk: recompute the region boundaries (space repartition) every TOPK_TAU compressed calls of a tensor.") \
  X(TOPK_TAU_PRIME, Int, "32", "1..1000000",                                                \
    "oktopk: recompute the exact local and global top-k thresholds every TOPK_TAU_PRIME compressed calls of a tensor; reuse (and nudge) them in between.") \
  X(WARMUP_CALLS, Int, "0", "0..1000000000",                                                \
    "Sparse algorithms run the dense allreduce for a tensor's first WARMUP_CALLS calls before compressing it.") \
  X(CLTK_LEADERS, Int, "0", "0..1048576",                                                  \
    "cltk: leaders per call. 0 (default): every rank selects its top floor(k/P) and the union of their indexes (at most k) is the shared index set, so no rank's largest entries wait for its turn. L >= 1: L consecutive ranks from a rotating one, each its top floor(k/L); 1 is the single rotating leader of CLT-k (ScaleCom), its top-k. At most P and k are used. docs/results/accuracy.md (session 7).") \
  X(BITS, Int, "", "0..16",                                                                \
    "qsgd: code width 1|2|4|8 (default 8). rbf: RBF word width 3..16 (default 10). fft: RBF word width of the kept bins 3..16 (default 10), 0 sends them as raw fp32.") \
  X(BUCKET, Int, "512", "1..16777216",                                                     \
    "qsgd: elements per quantization bucket; each bucket sends its min and max (8 bytes) besides the codes.") \
  X(RBF_MANTISSA, Int, "", "0..14",                                                        \
    "rbf, fft: mantissa bits m of the range-based float (at most BITS-2). Unset: BITS-4 (10 bits -> 6, the paper's layout).") \
  X(RBF_VMAX, Double, "", "1e-30..1e38",                                                   \
    "rbf, fft: fixed largest magnitude vmax (larger values saturate; eps follows from it). Unset: tracked per call from the data (the largest |x| over all ranks, agreed through a small exchange).") \
  X(QUANT_SEED, Int, "0", "0..2147483647",                                                 \
    "qsgd: seed of the counter-based stochastic rounding; with the call number, rank and phase it fixes every rounding, so ranks and reruns reproduce.") \
  X(QUANT_OWNER_EF, Bool, "", "",                                                          \
    "qsgd, rbf: owner-side error feedback. Each chunk owner re-encodes its fp32 sum for the allgather; on, the owner keeps what that second encoding lost (times P for avg, in its own input's units) in its residual, so it is sent with the next call instead of lost. Unset: on for qsgd, off for rbf (docs/results/accuracy.md). Needs GRADCOMP_EF on.") \
  X(SIGN_EF, Bool, "1", "",                                                                \
    "sign: error feedback (EF-signSGD): keep acc - s_r*d per tensor (d the agreed decisions, s_r this rank's share of the block scale) and add it to the next call; it feeds back what the majority and its tie rule got wrong. Needs GRADCOMP_EF on.") \
  X(SIGN_TIES, Enum, "hash", "hash|negative",                                              \
    "sign: how a tie (2:2 votes at even P) is decided: hash, +1 or -1 by a hash of (call, element) that every rank computes alike (no bits, no bias); negative, -1 as in the paper, which moves tied coordinates the same way every call.") \
  X(SIGN_BLOCK, Int, "1024", "1..1073741824",                                               \
    "sign: elements per output-scale block; each block's magnitude is the projection of the exact result onto its decisions, one fp32 share per block and rank is exchanged.") \
  X(THETA, Double, "0.85", "0..1",                                                         \
    "fft: fraction of frequency bins dropped per chunk (the rest, by energy, is sent); 0 sends every bin.") \
  X(THETA_DECAY_CALLS, Int, "0", "0..1000000000",                                          \
    "fft: theta decays linearly from THETA to 0 over this many calls of the algorithm on a communicator (then stays 0); 0 keeps THETA constant.") \
  X(FFT_CHUNK, Int, "16384", "2..67108864",                                                \
    "fft: elements per real-to-complex transform; a buffer is transformed in chunks of this length (the last one shorter).") \
  X(AUTO_CANDIDATES, String, "dense,qsgd:BITS=8,qsgd:BITS=4,oktopk", "",                  \
    "auto: the algorithms it chooses among per call, a comma list of NAME[:PARAM=VALUE...] (a registry algorithm, optionally with its own parameters; the rest come from the configuration, e.g. oktopk at GRADCOMP_DENSITY). Under the NCCL interposer dense is NCCL's own allreduce. A bad list runs dense, with a message naming this variable.") \
  X(AUTO_PROBE_MS, Int, "250", "10..600000",                                                \
    "auto: planned time of the calibration probe at wiring (link latency and bandwidth, each candidate's time and bytes at growing sizes, agreed across ranks): its sizes are chosen to fit it.") \
  X(AUTO_PROBE_LIMIT_MS, Int, "1000", "10..3600000",                                       \
    "auto: time limit of the calibration probe (at least GRADCOMP_AUTO_PROBE_MS is used). Past it, at a phase boundary, the probe gives up on every rank and the communicator runs dense, with a message naming this variable.") \
  X(AUTO_REFINE_CALLS, Int, "16", "1..1000000",                                            \
    "auto: calls of a size class between agreements of measured call times (a small exchange across ranks) that refine the model.") \
  X(AUTO_TRIAL_MS, Int, "250", "0..600000",                                                \
    "auto: predicted time of a size class's trials: rounds (two calls per tried candidate, the second measured) are added to three while the model predicts they fit, up to eight, so cheap sizes are decided on more calls; 0: three rounds.") \
  X(AUTO_HYSTERESIS, Double, "0.1", "0..1",                                                \
    "auto: a size class moves to another candidate only when that one is predicted this fraction faster than the current one.") \
  X(AUTO_EXPLORE, Double, "3", "1..100",                                                   \
    "auto: a size class first tries every candidate predicted within this factor of the best prediction (3 to 8 rounds of two calls each, GRADCOMP_AUTO_TRIAL_MS; per measured call the slowest rank's time, the median over calls decides); 1 trusts the model alone.") \
  X(ALGO, String, "off", "",                                                                \
    "NCCL interposer and CollNet plugin: algorithm for eligible ncclAllReduce calls and CollNet chunks (a registry name such as qsgd, or auto: per call the candidate of GRADCOMP_AUTO_CANDIDATES a model calibrated on this job predicts fastest), or off for pure pass-through (the CollNet plugin then offers no device).") \
  X(RS_ALGO, String, "", "",                                                                \
    "NCCL interposer: algorithm for eligible ncclReduceScatter calls (FSDP, ZeRO): a registry name with a reduce-scatter form (dense, qsgd, rbf, sign, ...; gradcomp-bench --list says which), off for pass-through, or empty: the call's algorithm (GRADCOMP_ALGO or its rule's) where it has a reduce-scatter form, else pass-through. Hierarchical under GRADCOMP_HIERARCHY like the allreduce: dense inside each host, the algorithm's reduce-scatter across hosts.") \
  X(AG_ALGO, String, "off", "",                                                             \
    "NCCL interposer: algorithm for eligible ncclAllGather calls (FSDP, ZeRO-3 parameter gathers): dense, blockq (int8/int4 codes, GRADCOMP_BITS, a scale per GRADCOMP_AG_BLOCK elements) or cast (bf16), or off (default) for pass-through. An allgather may carry activations (tensor and sequence parallelism): flag only data-parallel communicators (GRADCOMP_COMMS). Hierarchical under GRADCOMP_HIERARCHY: compressed across hosts, dense inside each host; every rank receives the same bytes.") \
  X(AG_BLOCK, Int, "2048", "1..16777216",                                                   \
    "blockq allgather (and cast with GRADCOMP_AG_CAST=fp8): elements per block; each block sends one fp32 scale (4 bytes) besides its codes.") \
  X(AG_CAST, Enum, "bf16", "bf16|fp8",                                                     \
    "cast allgather: bf16 (bfloat16, 2 bytes per element, round to nearest even) or fp8 (e4m3 bytes of the value over a per-block scale, one fp32 scale per GRADCOMP_AG_BLOCK elements).") \
  X(COMMS, String, "all", "",                                                               \
    "NCCL interposer: communicators to compress: all, none, or a comma list of index:N (creation order), size:N (nranks), name:GLOB (commName).") \
  X(MIN_BYTES, Size, "1M", "0..1T",                                                         \
    "NCCL interposer: allreduce calls smaller than this many bytes pass through to NCCL. Tuner plugin: allreduces of at least this many bytes are steered to CollNet when the CollNet plugin compresses.") \
  X(CONFIG, String, "/etc/gradcomp.conf", "",                                               \
    "NCCL interposer: admin TOML file with defaults and per-communicator / per-size rules; GRADCOMP_* variables override it. The default file is read when it exists; a file named here must exist; empty: no file.") \
  X(SELFTEST, Enum, "auto", "auto|on|off",                                                  \
    "NCCL interposer: before a flagged communicator's first compressed call touches a user buffer, every rank runs each algorithm the communicator may use on private buffers through the executor real calls take, checks its result against the algorithm's reference and exchanges its verdict over NCCL; if any rank failed, every rank passes that communicator's calls through to NCCL for the rest of the job. auto: on where calls run on a device executor. Also the admin file's selftest key.") \
  X(SELFTEST_TIMEOUT_S, Double, "30", "1..3600",                                           \
    "NCCL interposer: seconds the self-test may take on a rank; a rank whose self-test has not finished by then counts as failed (timeout), and the stuck test is abandoned.") \
  X(SELFTEST_INJECT, String, "", "",                                                        \
    "Drills the self-test's safety net: KIND:RANK (KIND wrong, error or stall) makes that rank's self-test give a wrong result, fail with an error, or stall past GRADCOMP_SELFTEST_TIMEOUT_S. Set the same value on every rank. Empty: none.") \
  X(SHADOW, Bool, "0", "",                                                                  \
    "NCCL interposer: shadow mode. Every call gradcomp would compress returns NCCL's own result, bit-identical to a run without gradcomp, and the compressed algorithm also runs on a copy of its input; the stats record per bucket the wire bytes against dense, the result's relative error against NCCL's, whether all ranks' compressed results agree, and both times (gradcomp-launch --shadow summarizes them). Host executor only for now. Also the admin file's shadow key.") \
  X(STATS, String, "", "",                                                                  \
    "NCCL interposer: path prefix; each rank writes PREFIX.rank<R>.json with per-communicator and per-bucket statistics.") \
  X(NCCL_LIBRARY, String, "", "",                                                           \
    "Forwarding libnccl.so.2 shim: path of the real NCCL library (else searched on the library path, skipping the shim itself).") \
  X(COLLNET_EF_PERIOD, Int, "0", "0..1000000000",                                          \
    "CollNet plugin: iallreduce calls per training step on each head rank. N > 0 keys error feedback by the call's position (call order mod N), staging slot and length; 0: no error feedback in CollNet (NCCL's chunks carry no tensor identity; docs/usage.md).") \
  X(NET_IFNAME, String, "", "",                                                             \
    "Net plugin: comma list of interface name prefixes to use (^ excludes). Default: every up IPv4 interface except loopback, loopback if none.")
