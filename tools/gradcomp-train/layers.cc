#include "tools/gradcomp-train/layers.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace gradcomp::train {
namespace {

// He-normal: std = sqrt(2 / fanIn), the usual choice in front of ReLU.
void heNormal(float* w, size_t n, int fanIn, Rng& rng) {
  const double std = std::sqrt(2.0 / fanIn);
  for (size_t i = 0; i < n; ++i) w[i] = static_cast<float>(rng.normal() * std);
}

class Dense final : public Layer {
 public:
  Dense(Shape in, int out) : in_(static_cast<int>(in.size())), out_(out) {}
  std::string name() const override { return "dense" + std::to_string(in_) + "x" + std::to_string(out_); }
  Shape outShape() const override { return {out_, 1, 1}; }
  std::vector<TensorSlice> tensors() const override {
    return {{name() + ".weight", 0, size_t(out_) * in_}, {name() + ".bias", 0, size_t(out_)}};
  }
  void bind(float* params, float* grads) override {
    w_ = params, b_ = params + size_t(out_) * in_;
    dw_ = grads, db_ = grads + size_t(out_) * in_;
  }
  void init(Rng& rng) override {
    heNormal(w_, size_t(out_) * in_, in_, rng);
    std::fill(b_, b_ + out_, 0.0f);
  }
  void forward(const float* in, float* out, int batch) override {
    for (int s = 0; s < batch; ++s) std::memcpy(out + size_t(s) * out_, b_, sizeof(float) * out_);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out_, in_, 1.0f, in, in_, w_, in_,
                1.0f, out, out_);
  }
  void backward(const float* in, const float*, const float* dOut, float* dIn, int batch) override {
    // dW = dOut^T x, db = column sums of dOut, dIn = dOut W.
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_, in_, batch, 1.0f, dOut, out_, in,
                in_, 0.0f, dw_, in_);
    std::fill(db_, db_ + out_, 0.0f);
    for (int s = 0; s < batch; ++s)
      for (int o = 0; o < out_; ++o) db_[o] += dOut[size_t(s) * out_ + o];
    if (dIn)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, in_, out_, 1.0f, dOut, out_,
                  w_, in_, 0.0f, dIn, in_);
  }

 private:
  int in_, out_;
  float *w_ = nullptr, *b_ = nullptr, *dw_ = nullptr, *db_ = nullptr;
};

class Relu final : public Layer {
 public:
  explicit Relu(Shape in) : shape_(in) {}
  std::string name() const override { return "relu"; }
  Shape outShape() const override { return shape_; }
  void forward(const float* in, float* out, int batch) override {
    const size_t n = shape_.size() * batch;
    for (size_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
  }
  void backward(const float*, const float* out, const float* dOut, float* dIn, int batch) override {
    if (!dIn) return;
    const size_t n = shape_.size() * batch;
    for (size_t i = 0; i < n; ++i) dIn[i] = out[i] > 0.0f ? dOut[i] : 0.0f;
  }

 private:
  Shape shape_;
};

class Conv2d final : public Layer {
 public:
  Conv2d(Shape in, int outC, int k, int pad)
      : in_(in), outC_(outC), k_(k), pad_(pad),
        out_{outC, in.h + 2 * pad - k + 1, in.w + 2 * pad - k + 1},
        cols_(size_t(in.c) * k * k * out_.h * out_.w) {}
  std::string name() const override {
    return "conv" + std::to_string(in_.c) + "x" + std::to_string(outC_) + "k" + std::to_string(k_);
  }
  Shape outShape() const override { return out_; }
  std::vector<TensorSlice> tensors() const override {
    return {{name() + ".weight", 0, size_t(outC_) * patch()}, {name() + ".bias", 0, size_t(outC_)}};
  }
  void bind(float* params, float* grads) override {
    w_ = params, b_ = params + size_t(outC_) * patch();
    dw_ = grads, db_ = grads + size_t(outC_) * patch();
  }
  void init(Rng& rng) override {
    heNormal(w_, size_t(outC_) * patch(), patch(), rng);
    std::fill(b_, b_ + outC_, 0.0f);
  }
  void forward(const float* in, float* out, int batch) override {
    const int hw = out_.h * out_.w;
    for (int s = 0; s < batch; ++s) {
      float* o = out + size_t(s) * out_.size();
      im2col(in + size_t(s) * in_.size());
      for (int c = 0; c < outC_; ++c) std::fill(o + size_t(c) * hw, o + size_t(c + 1) * hw, b_[c]);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, outC_, hw, patch(), 1.0f, w_, patch(),
                  cols_.data(), hw, 1.0f, o, hw);
    }
  }
  void backward(const float* in, const float*, const float* dOut, float* dIn, int batch) override {
    const int hw = out_.h * out_.w;
    std::fill(db_, db_ + outC_, 0.0f);
    for (int s = 0; s < batch; ++s) {
      const float* d = dOut + size_t(s) * out_.size();
      im2col(in + size_t(s) * in_.size());
      // dW (+)= dOut_s cols^T; the first sample overwrites.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, outC_, patch(), hw, 1.0f, d, hw,
                  cols_.data(), hw, s == 0 ? 0.0f : 1.0f, dw_, patch());
      for (int c = 0; c < outC_; ++c)
        for (int i = 0; i < hw; ++i) db_[c] += d[size_t(c) * hw + i];
      if (dIn) {
        // dCols = W^T dOut_s, scattered back onto the input positions.
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, patch(), hw, outC_, 1.0f, w_, patch(),
                    d, hw, 0.0f, cols_.data(), hw);
        col2im(dIn + size_t(s) * in_.size());
      }
    }
  }

 private:
  int patch() const { return in_.c * k_ * k_; }
  // cols_[(c*k + ky)*k + kx][oy*W + ox] = x[c][oy + ky - pad][ox + kx - pad] (0 outside).
  // Each (tap, output row) touches one contiguous run of the input row.
  void im2col(const float* x) {
    const int hw = out_.h * out_.w;
    for (int c = 0; c < in_.c; ++c)
      for (int ky = 0; ky < k_; ++ky)
        for (int kx = 0; kx < k_; ++kx) {
          float* row = cols_.data() + size_t((c * k_ + ky) * k_ + kx) * hw;
          const int oxBegin = std::max(0, pad_ - kx), oxEnd = std::min(out_.w, in_.w + pad_ - kx);
          for (int oy = 0; oy < out_.h; ++oy) {
            float* dst = row + oy * out_.w;
            const int iy = oy + ky - pad_;
            if (iy < 0 || iy >= in_.h || oxBegin >= oxEnd) {
              std::fill(dst, dst + out_.w, 0.0f);
              continue;
            }
            const float* src = x + (size_t(c) * in_.h + iy) * in_.w + (kx - pad_);
            std::fill(dst, dst + oxBegin, 0.0f);
            std::copy(src + oxBegin, src + oxEnd, dst + oxBegin);
            std::fill(dst + oxEnd, dst + out_.w, 0.0f);
          }
        }
  }
  // The adjoint of im2col: every column entry added back onto its input pixel.
  void col2im(float* dx) {
    std::fill(dx, dx + in_.size(), 0.0f);
    const int hw = out_.h * out_.w;
    for (int c = 0; c < in_.c; ++c)
      for (int ky = 0; ky < k_; ++ky)
        for (int kx = 0; kx < k_; ++kx) {
          const float* row = cols_.data() + size_t((c * k_ + ky) * k_ + kx) * hw;
          const int oxBegin = std::max(0, pad_ - kx), oxEnd = std::min(out_.w, in_.w + pad_ - kx);
          for (int oy = 0; oy < out_.h; ++oy) {
            const int iy = oy + ky - pad_;
            if (iy < 0 || iy >= in_.h) continue;
            float* dst = dx + (size_t(c) * in_.h + iy) * in_.w + (kx - pad_);
            const float* src = row + oy * out_.w;
            for (int ox = oxBegin; ox < oxEnd; ++ox) dst[ox] += src[ox];
          }
        }
  }

  Shape in_;
  int outC_, k_, pad_;
  Shape out_;
  std::vector<float> cols_;  // [patch x out h*w], one sample at a time
  float *w_ = nullptr, *b_ = nullptr, *dw_ = nullptr, *db_ = nullptr;
};

class MaxPool2 final : public Layer {
 public:
  explicit MaxPool2(Shape in) : in_(in), out_{in.c, in.h / 2, in.w / 2} {}
  std::string name() const override { return "maxpool2"; }
  Shape outShape() const override { return out_; }
  void forward(const float* in, float* out, int batch) override {
    argmax_.resize(out_.size() * batch);
    for (int s = 0; s < batch; ++s)
      for (int c = 0; c < in_.c; ++c)
        for (int oy = 0; oy < out_.h; ++oy)
          for (int ox = 0; ox < out_.w; ++ox) {
            const size_t base = size_t(s) * in_.size() + (size_t(c) * in_.h + 2 * oy) * in_.w + 2 * ox;
            size_t best = base;
            for (size_t at : {base + 1, base + in_.w, base + in_.w + 1})
              if (in[at] > in[best]) best = at;
            const size_t o = size_t(s) * out_.size() + (size_t(c) * out_.h + oy) * out_.w + ox;
            out[o] = in[best];
            argmax_[o] = best;
          }
  }
  void backward(const float*, const float*, const float* dOut, float* dIn, int batch) override {
    if (!dIn) return;
    std::fill(dIn, dIn + in_.size() * batch, 0.0f);
    for (size_t o = 0; o < out_.size() * batch; ++o) dIn[argmax_[o]] += dOut[o];
  }

 private:
  Shape in_, out_;
  std::vector<size_t> argmax_;  // input index (batch-absolute) of each output's maximum
};

}  // namespace

std::unique_ptr<Layer> makeDense(Shape in, int outFeatures) {
  return std::make_unique<Dense>(in, outFeatures);
}
std::unique_ptr<Layer> makeRelu(Shape in) { return std::make_unique<Relu>(in); }
std::unique_ptr<Layer> makeConv2d(Shape in, int outChannels, int kernel, int pad) {
  return std::make_unique<Conv2d>(in, outChannels, kernel, pad);
}
std::unique_ptr<Layer> makeMaxPool2(Shape in) { return std::make_unique<MaxPool2>(in); }

}  // namespace gradcomp::train
