#include "algorithms/auto/auto_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gradcomp::algo::autosel {
namespace {

constexpr double kModelVersion = 1;
constexpr size_t kHeaderWords = 5;     // version, nranks, alpha, beta, candidates
constexpr size_t kCandidateWords = 7;  // usable, scales, latency, w0, w1, c0, c1

// y = y0 + slope * x through (x1, y1) and (x2, y2), clamped so that neither
// the slope nor the intercept is negative (measurement noise at small sizes).
void affine(double x1, double y1, double x2, double y2, double* y0, double* slope) {
  y1 = std::max(0.0, y1), y2 = std::max(0.0, y2);
  if (x2 <= x1) {
    *slope = x1 > 0 ? y1 / x1 : 0;
    *y0 = 0;
    return;
  }
  *slope = (y2 - y1) / (x2 - x1);
  *y0 = y1 - *slope * x1;
  if (*slope < 0) {  // larger size measured cheaper: a flat cost
    *slope = 0;
    *y0 = std::max(y1, y2);
  } else if (*y0 < 0) {  // through the origin and the larger sample
    *y0 = 0;
    *slope = y2 / x2;
  }
}

double scaleOf(const CandidateFit& c, DataType dtype) {
  return c.elementSizeScales ? double(dtypeSize(dtype)) / 4.0 : 1.0;
}

}  // namespace

CandidateFit fitCandidate(const std::vector<ProbeSample>& samples, const LinkFit& link,
                          bool elementSizeScales) {
  CandidateFit fit;
  fit.elementSizeScales = elementSizeScales;
  if (samples.empty()) return fit;
  auto bySize = samples;
  std::sort(bySize.begin(), bySize.end(),
            [](const ProbeSample& a, const ProbeSample& b) { return a.count < b.count; });
  for (const ProbeSample& s : bySize)
    if (!(std::isfinite(s.totalS) && std::isfinite(s.computeS) && std::isfinite(s.wireBytes) &&
          s.count > 0))
      return fit;
  const ProbeSample& lo = bySize.front();
  const ProbeSample& hi = bySize.back();
  const double beta = link.betaSPerByte;
  // Latency: the smallest run's wait that its bytes do not explain.
  fit.latencyS = std::clamp(lo.totalS - lo.computeS - lo.wireBytes * beta, 0.0,
                            std::max(0.0, lo.totalS - lo.wireBytes * beta));
  affine(lo.count, lo.wireBytes, hi.count, hi.wireBytes, &fit.wire0, &fit.wirePerElement);
  // Compute: the rest of each run (work outside waits, and the copies and
  // synchronization a transport does outside its waits), so the model
  // reproduces the measured totals at the probe sizes.
  auto rest = [&](const ProbeSample& s) { return s.totalS - fit.latencyS - s.wireBytes * beta; };
  affine(lo.count, rest(lo), hi.count, rest(hi), &fit.compute0, &fit.computePerElement);
  fit.usable = true;
  return fit;
}

double predictWireBytes(const Model& model, size_t candidate, size_t count, DataType dtype) {
  if (candidate >= model.candidates.size() || !model.candidates[candidate].usable)
    return std::numeric_limits<double>::infinity();
  const CandidateFit& c = model.candidates[candidate];
  return c.wire0 + c.wirePerElement * double(count) * scaleOf(c, dtype);
}

double predictSeconds(const Model& model, size_t candidate, size_t count, DataType dtype) {
  if (candidate >= model.candidates.size() || !model.candidates[candidate].usable)
    return std::numeric_limits<double>::infinity();
  const CandidateFit& c = model.candidates[candidate];
  const double n = double(count) * scaleOf(c, dtype);
  return c.latencyS + predictWireBytes(model, candidate, count, dtype) * model.link.betaSPerByte +
         c.compute0 + c.computePerElement * n;
}

std::vector<double> modelWords(const Model& m) {
  std::vector<double> w{kModelVersion, double(m.nranks), m.link.alphaS, m.link.betaSPerByte,
                        double(m.candidates.size())};
  for (const CandidateFit& c : m.candidates) {
    w.insert(w.end(), {c.usable ? 1.0 : 0.0, c.elementSizeScales ? 1.0 : 0.0, c.latencyS, c.wire0,
                       c.wirePerElement, c.compute0, c.computePerElement});
  }
  return w;
}

Status modelFromWords(const std::vector<double>& w, Model* out) {
  GC_REQUIRE(w.size() >= kHeaderWords && w[0] == kModelVersion, Err::InvalidArgument,
             "auto model: %zu words, version %g: expected version %g", w.size(),
             w.empty() ? 0.0 : w[0], kModelVersion);
  const size_t n = size_t(w[4]);
  GC_REQUIRE(w[4] >= 0 && double(n) == w[4] && w.size() == kHeaderWords + n * kCandidateWords,
             Err::InvalidArgument, "auto model: %zu words for %g candidates: expected %zu",
             w.size(), w[4], kHeaderWords + n * kCandidateWords);
  Model m;
  m.nranks = int(w[1]);
  m.link.alphaS = w[2];
  m.link.betaSPerByte = w[3];
  for (size_t i = 0; i < n; ++i) {
    const double* c = &w[kHeaderWords + i * kCandidateWords];
    CandidateFit f;
    f.usable = c[0] != 0;
    f.elementSizeScales = c[1] != 0;
    f.latencyS = c[2];
    f.wire0 = c[3];
    f.wirePerElement = c[4];
    f.compute0 = c[5];
    f.computePerElement = c[6];
    m.candidates.push_back(f);
  }
  *out = m;
  return Status::Ok();
}

std::vector<double> slotMax(const std::vector<std::vector<double>>& words) {
  std::vector<double> out;
  for (const auto& w : words) {
    if (out.empty()) {
      out = w;
      continue;
    }
    for (size_t i = 0; i < out.size() && i < w.size(); ++i) {
      // NaN in any rank's slot wins, so a broken measurement is never hidden.
      if (std::isnan(w[i]) || w[i] > out[i]) out[i] = w[i];
    }
  }
  return out;
}

}  // namespace gradcomp::algo::autosel
