// Layers of the trainer's models, float32, batch-major activations: a batch of
// B samples of shape {c, h, w} is B contiguous c*h*w blocks (NCHW).
//
// Contract of every layer:
// - Parameters live in the network's flat vector; bind() hands the layer its
//   slices (weights first, then bias), and the matching gradient slices.
// - forward(in, out, B) may keep per-batch state (max-pool argmax) for the next
//   backward() of the same batch.
// - backward() OVERWRITES its parameter gradients with d(loss)/d(param) for
//   this batch (no accumulation across calls) and writes d(loss)/d(in) into
//   dIn unless dIn is null (the first layer skips that work).
// Matrix products go through CBLAS.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "tools/gradcomp-train/rng.h"

namespace gradcomp::train {

struct Shape {
  int c = 1, h = 1, w = 1;
  size_t size() const { return static_cast<size_t>(c) * h * w; }
};

// A named slice of the flat parameter vector (one tensor, like a DDP param).
struct TensorSlice {
  std::string name;
  size_t offset = 0, count = 0;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string name() const = 0;
  virtual Shape outShape() const = 0;
  // Parameter tensors as {name, count} in the order bind() expects them.
  virtual std::vector<TensorSlice> tensors() const { return {}; }
  virtual void bind(float* /*params*/, float* /*grads*/) {}
  virtual void init(Rng& /*rng*/) {}
  virtual void forward(const float* in, float* out, int batch) = 0;
  virtual void backward(const float* in, const float* out, const float* dOut, float* dIn,
                        int batch) = 0;
};

// y = x W^T + b; W is [out x in] row-major. He-normal init (ReLU networks).
std::unique_ptr<Layer> makeDense(Shape in, int outFeatures);
// Elementwise max(0, x).
std::unique_ptr<Layer> makeRelu(Shape in);
// Square kernel k, stride 1, zero padding pad; W is [outC x inC*k*k].
std::unique_ptr<Layer> makeConv2d(Shape in, int outChannels, int kernel, int pad);
// 2x2 max pooling, stride 2 (h and w must be even).
std::unique_ptr<Layer> makeMaxPool2(Shape in);

}  // namespace gradcomp::train
