// gradcomp-train's model math, single process: layer gradients against finite
// differences, exact small cases for conv and pooling, the DDP bucket plan, the
// IDX reader, and a short in-process training run that must learn.
#include <catch2/catch.hpp>
#include <cblas.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>
#include <unistd.h>

#include "tools/gradcomp-train/flags.h"
#include "tools/gradcomp-train/idx.h"
#include "tools/gradcomp-train/model.h"
#include "tools/gradcomp-train/reducer.h"
#include "tools/gradcomp-train/trainer.h"

using namespace gradcomp;
using namespace gradcomp::train;

namespace {

struct Batch {
  std::vector<float> x;
  std::vector<uint8_t> y;
};

Batch randomBatch(Shape shape, int n, uint64_t seed) {
  Rng rng(seed);
  Batch b;
  b.x.resize(shape.size() * n);
  for (float& v : b.x) v = static_cast<float>(rng.normal());
  for (int i = 0; i < n; ++i) b.y.push_back(static_cast<uint8_t>(rng.below(10)));
  return b;
}

// For every parameter tensor: the analytic directional derivative g.d along a
// random unit direction d against the central difference
// (L(w + h d) - L(w - h d)) / 2h. Returns the worst |fd - an| / (|an| + floor).
double worstDirectionalError(const std::string& kind, Shape input, int batch) {
  std::unique_ptr<Network> net;
  REQUIRE(Network::create(kind, input, 10, &net).ok());
  net->init(7);
  // Non-zero biases so their gradients are exercised off the init point.
  for (const TensorSlice& t : net->tensors())
    if (t.name.find(".bias") != std::string::npos)
      for (size_t i = 0; i < t.count; ++i) net->params()[t.offset + i] = 0.05f * ((i % 5) - 2.0f);
  const Batch b = randomBatch(input, batch, 11);
  net->trainStep(b.x.data(), b.y.data(), batch);
  const std::vector<float> grads(net->grads(), net->grads() + net->paramCount());
  const std::vector<float> w0(net->params(), net->params() + net->paramCount());

  Rng rng(3);
  double worst = 0;
  for (const TensorSlice& t : net->tensors()) {
    std::vector<double> d(t.count);
    double norm = 0;
    for (double& v : d) {
      v = rng.normal();
      norm += v * v;
    }
    norm = std::sqrt(norm);
    double analytic = 0;
    for (size_t i = 0; i < t.count; ++i) analytic += grads[t.offset + i] * (d[i] /= norm);
    // h: large enough that float32 rounding of the loss (~1e-7 relative) stays
    // well under the tolerance, small enough that ReLU/max kinks are rarely
    // crossed (inputs are kept small for that reason: at 28x28 the CNN's ~19k
    // ReLU units make crossings likely). Measured errors are <= 1e-3; a missing
    // or misplaced term in a backward pass is off by far more than 1e-2.
    const double h = 1e-2;
    auto lossAt = [&](double sign) {
      for (size_t i = 0; i < t.count; ++i)
        net->params()[t.offset + i] = static_cast<float>(w0[t.offset + i] + sign * h * d[i]);
      const double l = net->evaluate(b.x.data(), b.y.data(), batch, nullptr);
      for (size_t i = 0; i < t.count; ++i) net->params()[t.offset + i] = w0[t.offset + i];
      return l;
    };
    const double numeric = (lossAt(+1) - lossAt(-1)) / (2 * h);
    const double err = std::fabs(numeric - analytic) / (std::fabs(analytic) + 1e-3);
    INFO(kind << " " << t.name << ": analytic " << analytic << " numeric " << numeric);
    CHECK(err < 1e-2);
    worst = std::max(worst, err);
  }
  return worst;
}

}  // namespace

TEST_CASE("MLP gradients match finite differences", "[train]") {
  openblas_set_num_threads(1);
  worstDirectionalError("mlp", {1, 28, 28}, 4);
}

TEST_CASE("CNN gradients match finite differences", "[train]") {
  // 8x8 input: both conv layers (padding included), both pools and the dense
  // head, with few enough ReLU units that the finite difference stays smooth.
  openblas_set_num_threads(1);
  worstDirectionalError("cnn", {1, 8, 8}, 2);
}

TEST_CASE("parameter counts of the two models", "[train]") {
  std::unique_ptr<Network> mlp, cnn;
  REQUIRE(Network::create("mlp", {1, 28, 28}, 10, &mlp).ok());
  REQUIRE(Network::create("cnn", {1, 28, 28}, 10, &cnn).ok());
  CHECK(mlp->paramCount() == 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
  CHECK(cnn->paramCount() == 8 * 25 + 8 + 16 * 8 * 25 + 16 + 784 * 64 + 64 + 64 * 10 + 10);
  std::unique_ptr<Network> bad;
  const Status s = Network::create("resnet", {1, 28, 28}, 10, &bad);
  CHECK(s.code() == Err::InvalidArgument);
  CHECK(s.message().find("mlp, cnn") != std::string::npos);
}

TEST_CASE("same seed gives identical weights, another seed different ones", "[train]") {
  std::unique_ptr<Network> a, b, c;
  REQUIRE(Network::create("mlp", {1, 28, 28}, 10, &a).ok());
  REQUIRE(Network::create("mlp", {1, 28, 28}, 10, &b).ok());
  REQUIRE(Network::create("mlp", {1, 28, 28}, 10, &c).ok());
  a->init(5), b->init(5), c->init(6);
  const size_t n = a->paramCount();
  CHECK(std::equal(a->params(), a->params() + n, b->params()));
  CHECK(!std::equal(a->params(), a->params() + n, c->params()));
}

TEST_CASE("conv with a centre-tap kernel copies its input; max-pool picks maxima", "[train]") {
  // 1 channel 4x4, kernel 3, pad 1, weight 1 at the centre tap: out = in + bias.
  auto conv = makeConv2d({1, 4, 4}, 1, 3, 1);
  std::vector<float> params(9 + 1, 0.0f), grads(10);
  params[4] = 1.0f;
  params[9] = 0.5f;
  conv->bind(params.data(), grads.data());
  std::vector<float> in(16), out(16);
  for (int i = 0; i < 16; ++i) in[i] = float(i) - 7.0f;
  conv->forward(in.data(), out.data(), 1);
  for (int i = 0; i < 16; ++i) CHECK(out[i] == in[i] + 0.5f);
  REQUIRE(conv->outShape().h == 4);

  auto pool = makeMaxPool2({1, 4, 4});
  std::vector<float> pooled(4), dOut{1, 2, 3, 4}, dIn(16);
  pool->forward(in.data(), pooled.data(), 1);
  // in = -7..8 row-major; each 2x2 window's maximum is its bottom-right element.
  CHECK(pooled == std::vector<float>{-2, 0, 6, 8});
  pool->backward(in.data(), pooled.data(), dOut.data(), dIn.data(), 1);
  CHECK(dIn[5] == 1);
  CHECK(dIn[7] == 2);
  CHECK(dIn[13] == 3);
  CHECK(dIn[15] == 4);
  float total = 0;
  for (float v : dIn) total += v;
  CHECK(total == 10);
}

TEST_CASE("bucket plan: reverse order, contiguous, whole tensors, cap respected", "[train]") {
  std::unique_ptr<Network> mlp;
  REQUIRE(Network::create("mlp", {1, 28, 28}, 10, &mlp).ok());
  for (double capMb : {0.0001, 0.25, 0.6, 1.0, 25.0}) {
    const size_t cap = size_t(capMb * 1024 * 1024);
    const std::vector<Bucket> buckets = planBuckets(mlp->tensors(), cap);
    INFO("cap " << cap);
    size_t end = mlp->paramCount();
    for (size_t i = 0; i < buckets.size(); ++i) {
      CHECK(buckets[i].key == i + 1);
      CHECK(buckets[i].offset + buckets[i].count == end);  // walks down from the end
      end = buckets[i].offset;
      if (i + 1 < buckets.size()) CHECK(buckets[i].count * sizeof(float) >= cap);
      bool startsAtTensor = false;
      for (const TensorSlice& t : mlp->tensors()) startsAtTensor |= t.offset == buckets[i].offset;
      CHECK(startsAtTensor);
    }
    CHECK(end == 0);
  }
  CHECK(planBuckets(mlp->tensors(), size_t(25) << 20).size() == 1);
  CHECK(planBuckets(mlp->tensors(), 1).size() == mlp->tensors().size());
}

namespace {

std::string writeIdx(const std::string& path, const std::vector<uint8_t>& header,
                     const std::vector<uint8_t>& body) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f);
  gzwrite(f, header.data(), unsigned(header.size()));
  if (!body.empty()) gzwrite(f, body.data(), unsigned(body.size()));
  gzclose(f);
  return path;
}

}  // namespace

TEST_CASE("IDX reader: round trip, bad magic, truncation, missing file", "[train]") {
  char tmpl[] = "/tmp/gc_idx_XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string dir = tmpl;
  // 3 images of 2x2, labels 0..2.
  writeIdx(dir + "/tiny-images-idx3-ubyte.gz", {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2},
           {0, 255, 0, 255, 10, 20, 30, 40, 1, 2, 3, 4});
  writeIdx(dir + "/tiny-labels-idx1-ubyte.gz", {0, 0, 8, 1, 0, 0, 0, 3}, {0, 1, 2});
  Dataset d;
  REQUIRE(loadFashionMnist(dir, "tiny", 0, &d).ok());
  CHECK(d.size() == 3);
  CHECK(d.rows == 2);
  CHECK(d.cols == 2);
  CHECK(d.labels == std::vector<uint8_t>{0, 1, 2});
  CHECK(d.image(0)[1] == Approx((1.0f - 0.2860f) / 0.3530f));
  REQUIRE(loadFashionMnist(dir, "tiny", 2, &d).ok());
  CHECK(d.size() == 2);
  CHECK(d.images.size() == 8);

  writeIdx(dir + "/bad-images-idx3-ubyte.gz", {0, 0, 9, 3, 0, 0, 0, 1}, {});
  Status s = loadFashionMnist(dir, "bad", 0, &d);
  CHECK(s.code() == Err::InvalidArgument);
  CHECK(s.message().find("magic") != std::string::npos);

  writeIdx(dir + "/short-images-idx3-ubyte.gz", {0, 0, 8, 3, 0, 0, 0, 9, 0, 0, 0, 2, 0, 0, 0, 2},
           {1, 2, 3});
  s = loadFashionMnist(dir, "short", 0, &d);
  CHECK(s.message().find("truncated") != std::string::npos);

  s = loadFashionMnist(dir + "/nowhere", "train", 0, &d);
  CHECK(s.code() == Err::InvalidArgument);
  CHECK(s.message().find(kDatasetPackage) != std::string::npos);
  CHECK(s.message().find("nowhere/train-images-idx3-ubyte.gz") != std::string::npos);
  REQUIRE(system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("the installed Fashion-MNIST has 60000 + 10000 balanced samples", "[train]") {
  Dataset train, test;
  const Status s = loadFashionMnist(kDefaultDataDir, "train", 0, &train);
  REQUIRE(s.ok());  // CI installs dataset-fashion-mnist; the message names it if not
  REQUIRE(loadFashionMnist(kDefaultDataDir, "t10k", 0, &test).ok());
  CHECK(train.size() == 60000);
  CHECK(test.size() == 10000);
  CHECK(train.rows == 28);
  std::vector<int> counts(10, 0);
  for (uint8_t l : train.labels) counts[l]++;
  for (int c : counts) CHECK(c == 6000);
}

TEST_CASE("in-process training on a learnable synthetic task", "[train]") {
  openblas_set_num_threads(1);
  // Class c lights up row c*2 of an 20x20 image, plus noise: separable, so a
  // working loop must get close to 100%; a broken gradient or update stays near 10%.
  Dataset data;
  data.rows = data.cols = 20;
  Rng rng(1);
  for (int i = 0; i < 2000; ++i) {
    const int c = static_cast<int>(rng.below(10));
    data.labels.push_back(static_cast<uint8_t>(c));
    for (int p = 0; p < 400; ++p)
      data.images.push_back(static_cast<float>(0.5 * rng.normal() + (p / 20 == 2 * c ? 1.5 : 0.0)));
  }
  for (const char* model : {"mlp", "cnn"}) {
    TrainOptions o;
    o.model = model;
    o.epochs = 2;
    o.bucketMb = 0.1;
    SingleProcessCollective single;
    std::vector<EpochStats> epochs;
    REQUIRE(runTraining(o, data, data, single, [&](const EpochStats& s) { epochs.push_back(s); }).ok());
    REQUIRE(epochs.size() == 2);
    INFO(model << ": loss " << epochs[0].trainLoss << " -> " << epochs[1].trainLoss << ", acc "
                << epochs[1].testAcc);
    CHECK(epochs[1].trainLoss < epochs[0].trainLoss);
    CHECK(epochs[1].testAcc > 0.95);
    CHECK(epochs[0].steps == 2000 / 32);
  }
}

namespace {
// parseFlags on a command line given as one string of space-separated words.
gradcomp::Status parseLine(const std::string& line, gradcomp::train::Flags* f) {
  std::vector<std::string> words{"gradcomp-train"};
  std::istringstream in(line);
  for (std::string w; in >> w;) words.push_back(w);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  return gradcomp::train::parseFlags(int(argv.size()), argv.data(), f);
}
}  // namespace

TEST_CASE("gradcomp-train: --momentum-correction auto is on for top-k methods and sign only", "[train]") {
  using gradcomp::train::Flags;
  struct Case { const char* line; bool on; };
  for (Case c : {Case{"--algo oktopk", true}, Case{"--algo cltk", true},
                 Case{"--algo gaussiank", true}, Case{"--algo topka", true},
                 Case{"--algo sign", true},
                 Case{"--algo dense", false}, Case{"--algo qsgd", false}, Case{"--algo fft", false},
                 Case{"--algo auto", false},  // a selector: it may choose dense
                 Case{"--algo oktopk --momentum 0", false},
                 Case{"--algo oktopk --average weights --period 2", false},
                 Case{"--algo oktopk --momentum-correction off", false},
                 Case{"--algo dense --momentum-correction on", true}}) {
    INFO(c.line);
    Flags f;
    REQUIRE(parseLine(c.line, &f).ok());
    CHECK(f.train.momentumCorrection == c.on);
  }
  Flags f;
  gradcomp::Status s = parseLine("--algo oktopk --momentum 0 --momentum-correction on", &f);
  REQUIRE(!s.ok());
  CHECK(s.toString().find("--momentum-correction on needs --momentum > 0") != std::string::npos);
  CHECK(!parseLine("--momentum-correction maybe", &f).ok());
}
