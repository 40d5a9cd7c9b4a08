// Gaussiank (Shi et al., 2019; the baseline of the Ok-Topk paper, Table 1
// and section 5.3): the selection threshold is estimated instead of
// selected. Each rank fits a Gaussian to its accumulator (mean mu, standard
// deviation sigma), takes the two-sided quantile of the density,
//   th_0 = |mu| + sigma * ppf(1 - density / 2),
// and, because real gradients have thinner tails than the Gaussian (the
// estimate admits too few entries as training goes on), scales it down
// geometrically, th_j = th_0 * 0.95^j, to the first one that admits more than
// 3k/4 entries (the adjustment the Ok-Topk paper applied to make the baseline
// comparable: "we gradually scale the predicted threshold until the number
// of selected values is more than 3k/4"), in steps of 0.95 (each admits at
// most ~2x more at a Gaussian tail). All candidates th_0..th_63 (down to
// 0.04 th_0) are counted in one pass (Backend::countAboveMany); when none
// admits 3k/4 the smallest is used. Every entry above the threshold is selected (there is no
// cap at k: the estimate can also admit more) and contributed, and the
// selections are allgathered and summed in rank order, as TopkA does.
// Volume ~ 2K(P-1) words per rank for K selected per rank; error feedback
// keeps everything not selected.
#include <algorithm>
#include <cmath>

#include "algorithms/sparse/collectives.h"
#include "algorithms/sparse/reference_frame.h"
#include "algorithms/sparse/sparse_common.h"
#include "algorithms/sparse/wire_format.h"

namespace gradcomp::algo::sparse {
namespace {

constexpr uint64_t kStepCounts = 0x50000, kStepGather = 0x50100;
constexpr int kCandidates = 64;
constexpr float kScale = 0.95f;

// The standard normal quantile (Acklam's rational approximation; relative
// error below 1.2e-9 on (0, 1)): plain arithmetic on the host, so every rank
// and the reference compute the same bits.
double normalQuantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  const double lo = 0.02425, hi = 1 - lo;
  if (p <= 0) return -INFINITY;
  if (p >= 1) return INFINITY;
  if (p < lo) {
    const double q = std::sqrt(-2 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > hi) {
    const double q = std::sqrt(-2 * std::log(1 - p));
    return -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  const double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

// The candidate thresholds th_0 * 0.95^j, j < kCandidates, from the moments.
std::vector<float> candidates(double sum, double sumSquares, size_t n, double density) {
  const double mu = sum / double(n);
  const double var = std::max(0.0, sumSquares / double(n) - mu * mu);
  const double th0 = std::fabs(mu) + std::sqrt(var) * normalQuantile(1 - density / 2);
  std::vector<float> th(kCandidates);
  float t = float(th0);
  for (float& v : th) v = t, t *= kScale;
  return th;
}

// The first candidate admitting more than 3k/4 entries (else the last).
size_t pick(const std::vector<size_t>& counts, size_t k) {
  for (size_t j = 0; j < counts.size(); ++j)
    if (4 * counts[j] > 3 * k) return j;
  return counts.size() - 1;
}

// This rank's threshold and the number of entries above it. One sync.
Status estimate(device::Backend& dev, const float* acc, size_t n, size_t k, double density,
                float* threshold, size_t* count) {
  double sum = 0, sumSquares = 0;
  GC_CHECK(dev.moments(acc, n, &sum, &sumSquares));
  GC_CHECK(dev.sync());
  const std::vector<float> th = candidates(sum, sumSquares, n, density);
  device::HostArray<float> thHost(dev);
  thHost.assign(th.data(), th.size());
  std::vector<size_t> counts(th.size());
  GC_CHECK(dev.countAboveMany(acc, n, thHost.data(), th.size(), counts.data()));
  GC_CHECK(dev.sync());
  const size_t j = pick(counts, k);
  *threshold = th[j];
  *count = counts[j];
  return Status::Ok();
}

class Gaussiank final : public SparseAlgorithm {
  Status schedule(Context& ctx, const AllreduceArgs& args, const SparseParams& params, size_t k,
                  float* acc, const FrameStats&, float* result) override {
    device::Backend& dev = ctx.dev;
    const int P = ctx.net.size(), me = ctx.net.rank();
    const size_t n = args.count;
    float th = 0;
    size_t count = 0;
    GC_CHECK(estimate(dev, acc, n, k, params.density, &th, &count));
    // Everything above the threshold is contributed: zeroed in acc as selected.
    Coo mine(dev);
    mine.resize(count);
    if (count)
      GC_CHECK(dev.compactAbove(acc, n, th, 0, 0, mine.idx.data(), mine.val.data(), count,
                                nullptr, /*zeroSelected=*/true));
    // Selection sizes are rank-local: exchanged first, so receivers size
    // their buffers exactly.
    std::vector<uint64_t> counts;
    GC_CHECK(allgatherWords(ctx, kStepCounts, {uint64_t(count)}, &counts));
    std::vector<size_t> caps(P);
    for (int r = 0; r < P; ++r) {
      GC_REQUIRE(counts[r] <= n, Err::RemoteError,
                 "gaussiank: rank %d announced %llu selected entries of %zu", r,
                 (unsigned long long)counts[r], n);
      caps[r] = wireBound(n, size_t(counts[r]));
    }
    std::vector<Bytes> blocks = bytesOn(dev, P);
    GC_CHECK(encodeSparse(dev, SparsePiece{&mine, 0, count, 0, n}, &blocks[me]));
    GC_CHECK(allgatherBlocks(ctx, kStepGather, caps, &blocks));
    Coo in(dev);
    in.resize(std::max<size_t>(*std::max_element(counts.begin(), counts.end()), 1));
    for (int r = 0; r < P; ++r) {
      size_t got = 0, used = 0;
      GC_CHECK(decodeSparse(dev, blocks[r].data(), blocks[r].size(), 0, n, in.idx.data(),
                            in.val.data(), size_t(counts[r]), r, &got, &used));
      GC_REQUIRE(used == blocks[r].size() && got == counts[r], Err::RemoteError,
                 "gaussiank: rank %d's message holds %zu entries in %zu of %zu bytes, it "
                 "announced %llu", r, got, used, blocks[r].size(), (unsigned long long)counts[r]);
      GC_CHECK(dev.scatterAdd(result, n, 0, in.idx.data(), in.val.data(), got));
    }
    return dev.sync();  // the decodes read `blocks`
  }
};

class GaussiankReference final : public SparseReference {
 public:
  using SparseReference::SparseReference;

 private:
  Status schedule(const AllreduceArgs& args, size_t k, std::vector<float>& sum) override {
    device::Backend& cpu = device::cpuBackend();
    const size_t n = args.count;
    for (int r = 0; r < frame().nranks(); ++r) {
      float th = 0;
      size_t count = 0;
      GC_CHECK(estimate(cpu, frame().acc(r), n, k, frame().params().density, &th, &count));
      Coo sel(cpu);
      sel.resize(count);
      if (count)
        GC_CHECK(cpu.compactAbove(frame().acc(r), n, th, 0, 0, sel.idx.data(), sel.val.data(),
                                  count, nullptr, true));
      GC_CHECK(cpu.scatterAdd(sum.data(), n, 0, sel.idx.data(), sel.val.data(), sel.size()));
    }
    return Status::Ok();
  }
};

}  // namespace

GC_REGISTER_ALGORITHM(gaussiank, {
    "gaussiank",
    "Gaussiank: threshold from a Gaussian fit of the accumulator (two-sided quantile of the "
    "density), scaled down to admit more than 3k/4, selections allgathered and summed; error "
    "feedback",
    {param::Id::DENSITY, param::Id::WARMUP_CALLS, param::Id::EF},
    [] { return std::unique_ptr<Algorithm>(new Gaussiank()); },
    [](int nranks) { return std::unique_ptr<Reference>(new GaussiankReference(nranks)); },
});

}  // namespace gradcomp::algo::sparse
