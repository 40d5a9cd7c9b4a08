// What the usual launchers (mpirun, srun, torchrun, PBS) tell a process about
// its job, for the standalone bootstrap (bootstrap.h) when no GRADCOMP_*
// variables say it. Only getenv and the files the launcher names are read.
//
// Rank and size, first complete pair wins:
//   1. RANK/WORLD_SIZE when TORCHELASTIC_RUN_ID is set (torchrun's workers:
//      torchrun is always the innermost launcher, e.g. under srun)
//   2. OMPI_COMM_WORLD_RANK/SIZE (Open MPI; beats Slurm for mpirun in an allocation)
//   3. PMI_RANK/PMI_SIZE (MPICH, Intel MPI, srun --mpi=pmi2)
//   4. SLURM_PROCID/SLURM_NTASKS (srun)
//   5. RANK/WORLD_SIZE (set by hand, torch.distributed.launch)
//
// Rendezvous when neither GRADCOMP_BOOTSTRAP nor MASTER_ADDR/MASTER_PORT is
// set (Open MPI, PMI and Slurm ranks only; torchrun always sets MASTER_*):
//   host: 127.0.0.1 when every rank is on this host (OMPI_COMM_WORLD_LOCAL_SIZE,
//         MPI_LOCALNRANKS or SLURM_STEP_NUM_NODES/SLURM_NNODES say so), else the
//         first host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST, else the first
//         line of $PBS_NODEFILE (the launchers' default mapping puts rank 0 there);
//   port: 20000 + hash(job id) % 12768 (below Linux's ephemeral range), the job
//         id from the launcher that gave the rank: OMPI_MCA_ess_base_jobid or
//         PMIX_NAMESPACE (Open MPI), SLURM_JOB_ID.SLURM_STEP_ID (Slurm, PMI under
//         srun), PMIX_NAMESPACE (PMI otherwise).
#pragma once

#include <string>

#include "common/status.h"

namespace gradcomp::transport {

enum class Launcher { None, Torchrun, OpenMpi, Pmi, Slurm, RankWorldSize };

struct LauncherRank {
  Launcher launcher = Launcher::None;
  int rank = 0, size = 1;
  std::string source;  // "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE"
};

// Launcher::None with rank 0 of 1 when no pair is set; errors name the variable.
Status launcherRankAndSize(LauncherRank* out);

struct DerivedRendezvous {
  std::string host;
  int port = -1;
  bool listenAny = false;  // rank 0 listens on every address (host is a name from the allocation)
  std::string source;      // how host and port were found, for messages
};

// The rendezvous of a launcher's job; an error that names what to set when it
// cannot be derived.
Status deriveRendezvous(const LauncherRank& who, DerivedRendezvous* out);

// First host of a Slurm hostlist ("gpu[07-09,12],login1" -> "gpu07");
// `origin` names the variable in errors.
Status firstHostOfHostlist(const std::string& hostlist, const std::string& origin, std::string* out);

}  // namespace gradcomp::transport
