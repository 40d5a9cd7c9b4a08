// The data-parallel training loop: every rank starts from the same seeded
// weights, trains on its own shard of the training set, and either averages
// gradients each step (--average grads) or applies its local gradient and
// averages the weights every `period` steps (--average weights, local SGD).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "tools/gradcomp-train/idx.h"
#include "tools/gradcomp-train/reducer.h"

namespace gradcomp::train {

enum class AverageMode { Gradients, Weights };

struct TrainOptions {
  std::string model = "mlp";
  int epochs = 2;
  int batch = 32;  // per rank
  double lr = 0.05;
  double momentum = 0.9;
  // Deep Gradient Compression's momentum correction with factor masking, done
  // by the training loop as a DDP communication hook would: each rank keeps
  // its velocity u = momentum * u + g and hands u to the allreduce (whose
  // error feedback accumulates it); u is cleared where the result is non-zero
  // (the entries sent) and the step is w -= lr * result. For sparse methods.
  bool momentumCorrection = false;
  double bucketMb = 25;  // DDP's default bucket_cap_mb
  // ZeRO-2 / FSDP style (ShardedStepper): gradients reduce-scattered, each
  // rank steps the parameters it owns, parameters allgathered dense.
  bool sharded = false;
  // ZeRO-3 (with sharded; flags --ag-algo): fp32 master shards stepped by
  // their owners, the full parameters are their allgather by the
  // collective's paramAllgather() (compressed), before every forward pass.
  bool zero3 = false;
  AverageMode average = AverageMode::Gradients;
  int period = 1;          // steps between weight averages (Weights mode)
  int straggleRanks = 0;   // ranks that sleep each step ...
  int straggleMs = 0;      // ... this long before communicating
  uint64_t seed = 1;
};

// Per-epoch results. Loss, times and bytes are means over the ranks; test
// accuracy is rank 0's model on the test set (in Weights mode the ranks' models
// differ between averages; rank 0's is reported).
struct EpochStats {
  int epoch = 0;          // 1-based
  double trainLoss = 0;   // mean minibatch loss over the epoch
  double testAcc = 0;     // fraction in [0, 1]
  double testAccMaster = 0;  // ZeRO-3: the same with the exact fp32 masters gathered
  double wallS = 0;       // the epoch's training time (evaluation excluded)
  double commS = 0;       // time inside the collective (waiting included)
  double wireBytes = 0;   // bytes sent in the epoch's averages
  double agWireBytes = 0; // ZeRO-3: bytes sent in the epoch's parameter allgathers
  double agCommS = 0;     // ZeRO-3: time inside them
  int steps = 0;          // optimizer steps in the epoch
};

// Collective over `comm`. Every rank needs the same options and datasets.
// onEpoch runs on every rank after each epoch (callers print on rank 0).
Status runTraining(const TrainOptions& options, const Dataset& trainSet, const Dataset& testSet,
             Collective& comm, const std::function<void(const EpochStats&)>& onEpoch);

// Fraction of `data` the model classifies correctly (forward only).
class Network;
double testAccuracy(Network& net, const Dataset& data);

}  // namespace gradcomp::train
