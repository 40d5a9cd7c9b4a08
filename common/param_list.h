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
    "This process's rank for standalone runs. Falls back to OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, RANK.") \
  X(NRANKS, Int, "", "1..1048576",                                                          \
    "Number of ranks for standalone runs. Falls back to OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS, WORLD_SIZE.") \
  X(BOOTSTRAP, String, "", "",                                                              \
    "host:port where rank 0 listens (UCX listener) for the standalone bootstrap. Falls back to MASTER_ADDR:MASTER_PORT.") \
  X(WAIT_SPIN_US, Int, "20", "0..1000000",                                                  \
    "Microseconds a wait busy-polls the network before it sleeps on the UCX event fd, so that more ranks than cores still make progress.") \
  X(DENSE_RD_MAX_BYTES, Size, "64K", "0..1G",                                               \
    "Dense allreduce uses recursive doubling up to this many bytes per rank, the ring (reduce-scatter + allgather) above.")
