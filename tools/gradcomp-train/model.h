// The trainer's models: a network of layers over one flat float32 parameter
// vector and a matching flat gradient vector (what DDP would bucket), ending in
// softmax cross-entropy over 10 classes.
//
//   mlp: 784-512-256-10 with ReLU (535,818 parameters)
//   cnn: conv5x5(1->8,pad 2)-ReLU-pool2-conv5x5(8->16,pad 2)-ReLU-pool2-
//        dense(784->64)-ReLU-dense(64->10) (54,314 parameters)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "tools/gradcomp-train/layers.h"

namespace gradcomp::train {

class Network {
 public:
  // kind: "mlp" or "cnn"; input: one sample's shape (1x28x28 for Fashion-MNIST).
  static Status create(const std::string& kind, Shape input, int classes,
                       std::unique_ptr<Network>* out);

  // Same seed -> bit-identical weights (every rank starts from the same model).
  void init(uint64_t seed);

  size_t paramCount() const { return params_.size(); }
  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  // Parameter tensors in flat-vector order (offset ascending, contiguous).
  const std::vector<TensorSlice>& tensors() const { return tensors_; }
  Shape inputShape() const { return input_; }
  int classes() const { return classes_; }

  // Forward, mean cross-entropy over the batch, backward: grads() then holds
  // d(mean loss)/d(params). Labels must be < classes(). Returns the mean loss.
  double trainStep(const float* x, const uint8_t* labels, int batch);
  // Forward only: mean loss (null labels: skipped, returns 0) and, when
  // predicted is non-null, the argmax class of each sample.
  double evaluate(const float* x, const uint8_t* labels, int batch, int* predicted);

 private:
  Network(std::vector<std::unique_ptr<Layer>> layers, Shape input, int classes);
  void forward(const float* x, int batch);
  // Softmax cross-entropy on the last activation; writes d(mean loss)/d(logits)
  // into dLogits when non-null.
  double softmaxLoss(const uint8_t* labels, int batch, float* dLogits);

  std::vector<std::unique_ptr<Layer>> layers_;
  Shape input_;
  int classes_;
  std::vector<float> params_, grads_;
  std::vector<TensorSlice> tensors_;
  std::vector<std::vector<float>> acts_;   // acts_[i]: output of layer i
  std::vector<std::vector<float>> dActs_;  // d(loss)/d(acts_[i])
  const float* input_data_ = nullptr;
};

}  // namespace gradcomp::train
