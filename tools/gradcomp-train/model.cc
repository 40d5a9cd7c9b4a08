#include "tools/gradcomp-train/model.h"

#include <algorithm>
#include <cmath>

namespace gradcomp::train {

Status Network::create(const std::string& kind, Shape input, int classes,
                       std::unique_ptr<Network>* out) {
  std::vector<std::unique_ptr<Layer>> layers;
  auto add = [&layers](std::unique_ptr<Layer> layer) { layers.push_back(std::move(layer)); };
  auto shape = [&layers, input] { return layers.empty() ? input : layers.back()->outShape(); };
  if (kind == "mlp") {
    add(makeDense(input, 512));
    add(makeRelu(shape()));
    add(makeDense(shape(), 256));
    add(makeRelu(shape()));
    add(makeDense(shape(), classes));
  } else if (kind == "cnn") {
    GC_REQUIRE(input.h % 4 == 0 && input.w % 4 == 0, Err::InvalidArgument,
               "--model cnn needs input height and width divisible by 4, got %dx%d", input.h,
               input.w);
    add(makeConv2d(input, 8, 5, 2));
    add(makeRelu(shape()));
    add(makeMaxPool2(shape()));
    add(makeConv2d(shape(), 16, 5, 2));
    add(makeRelu(shape()));
    add(makeMaxPool2(shape()));
    add(makeDense(shape(), 64));
    add(makeRelu(shape()));
    add(makeDense(shape(), classes));
  } else {
    return makeStatus(Err::InvalidArgument, "--model '%s' is unknown; accepted: mlp, cnn",
                      kind.c_str());
  }
  out->reset(new Network(std::move(layers), input, classes));
  return Status::Ok();
}

Network::Network(std::vector<std::unique_ptr<Layer>> layers, Shape input, int classes)
    : layers_(std::move(layers)), input_(input), classes_(classes) {
  size_t total = 0;
  for (auto& layer : layers_)
    for (TensorSlice t : layer->tensors()) {
      t.offset = total;
      total += t.count;
      tensors_.push_back(t);
    }
  params_.assign(total, 0.0f);
  grads_.assign(total, 0.0f);
  size_t offset = 0;
  for (auto& layer : layers_) {
    layer->bind(params_.data() + offset, grads_.data() + offset);
    for (const TensorSlice& t : layer->tensors()) offset += t.count;
  }
  acts_.resize(layers_.size());
  dActs_.resize(layers_.size());
}

void Network::init(uint64_t seed) {
  Rng rng(seed);
  for (auto& layer : layers_) layer->init(rng);
}

void Network::forward(const float* x, int batch) {
  input_data_ = x;
  const float* in = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    acts_[i].resize(layers_[i]->outShape().size() * batch);
    layers_[i]->forward(in, acts_[i].data(), batch);
    in = acts_[i].data();
  }
}

double Network::softmaxLoss(const uint8_t* labels, int batch, float* dLogits) {
  const float* logits = acts_.back().data();
  double total = 0;
  std::vector<double> p(classes_);
  for (int s = 0; s < batch; ++s) {
    const float* z = logits + size_t(s) * classes_;
    const float zmax = *std::max_element(z, z + classes_);  // shift for exp() range
    double sum = 0;
    for (int c = 0; c < classes_; ++c) sum += p[c] = std::exp(double(z[c]) - zmax);
    total -= std::log(p[labels[s]] / sum);
    if (dLogits)
      for (int c = 0; c < classes_; ++c)
        dLogits[size_t(s) * classes_ + c] =
            static_cast<float>((p[c] / sum - (c == labels[s] ? 1.0 : 0.0)) / batch);
  }
  return total / batch;
}

double Network::trainStep(const float* x, const uint8_t* labels, int batch) {
  forward(x, batch);
  const size_t last = layers_.size() - 1;
  dActs_[last].resize(acts_[last].size());
  const double loss = softmaxLoss(labels, batch, dActs_[last].data());
  for (size_t i = last + 1; i-- > 0;) {
    const float* in = i == 0 ? input_data_ : acts_[i - 1].data();
    float* dIn = nullptr;
    if (i > 0) {
      dActs_[i - 1].resize(acts_[i - 1].size());
      dIn = dActs_[i - 1].data();
    }
    layers_[i]->backward(in, acts_[i].data(), dActs_[i].data(), dIn, batch);
  }
  return loss;
}

double Network::evaluate(const float* x, const uint8_t* labels, int batch, int* predicted) {
  forward(x, batch);
  if (predicted) {
    const float* logits = acts_.back().data();
    for (int s = 0; s < batch; ++s) {
      const float* z = logits + size_t(s) * classes_;
      predicted[s] = static_cast<int>(std::max_element(z, z + classes_) - z);
    }
  }
  return labels ? softmaxLoss(labels, batch, nullptr) : 0.0;
}

}  // namespace gradcomp::train
