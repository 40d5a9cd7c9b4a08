#include "tools/gradcomp-sim/auto_check.h"

#include <cstdio>

#include "algorithms/auto/candidates.h"

namespace gradcomp::sim {
namespace {

SimJob candidateJob(const SimJob& base, const algo::autosel::CandidateSpec& c, int ranks,
                    size_t count) {
  SimJob job = base;
  job.algo = c.algo;
  job.ranks = ranks;
  job.count = count;
  for (const auto& [name, value] : c.params) (void)job.config.set(name, value, c.label);
  return job;
}

}  // namespace

Status autoCheck(const SimJob& base, int ranks, const std::vector<size_t>& counts,
                 AutoCheckResult* out, const std::vector<size_t>& levels) {
  std::string text;
  GC_CHECK(base.config.getString(param::Id::AUTO_CANDIDATES, &text));
  std::vector<algo::autosel::CandidateSpec> specs;
  GC_CHECK(algo::autosel::parseCandidates(text, "GRADCOMP_AUTO_CANDIDATES", &specs));
  AutoCheckResult r;
  r.ranks = ranks;
  r.model.nranks = ranks;
  r.model.link.alphaS = base.model.alphaS;
  r.model.link.betaSPerByte = base.model.betaSPerByte;
  for (const auto& c : specs) {
    r.labels.push_back(c.label);
    std::vector<algo::autosel::ProbeSample> samples;
    for (size_t n : levels) {
      SimJob job = candidateJob(base, c, ranks, n);
      SimResult onLink, free;
      GC_CHECK(runSim(job, &onLink));
      job.model.alphaS = job.model.betaSPerByte = job.model.hostSPerByte = 0;
      GC_CHECK(runSim(job, &free));
      samples.push_back({double(n), onLink.timeS, free.timeS, onLink.sentMax});
    }
    r.model.candidates.push_back(algo::autosel::fitCandidate(samples, r.model.link, c.isDense()));
  }
  for (size_t n : counts) {
    AutoCheckRow row;
    row.count = n;
    for (size_t c = 0; c < specs.size(); ++c) {
      SimResult res;
      GC_CHECK(runSim(candidateJob(base, specs[c], ranks, n), &res));
      row.predictedS.push_back(algo::autosel::predictSeconds(r.model, c, n, DataType::Float32));
      row.simulatedS.push_back(res.timeS);
      if (row.chosen < 0 || row.predictedS[c] < row.predictedS[size_t(row.chosen)]) row.chosen = int(c);
      if (row.best < 0 || row.simulatedS[c] < row.simulatedS[size_t(row.best)]) row.best = int(c);
    }
    r.rows.push_back(row);
  }
  *out = r;
  return Status::Ok();
}

int runAutoCheck(const SimJob& base, const std::vector<int>& ranks, const std::vector<size_t>& counts,
                 const std::string& jsonPath) {
  FILE* json = jsonPath.empty() ? nullptr : std::fopen(jsonPath.c_str(), "w");
  if (!jsonPath.empty() && !json) {
    std::fprintf(stderr, "gradcomp-sim: cannot write --json %s\n", jsonPath.c_str());
    return 2;
  }
  std::printf("# gradcomp-sim --auto-check: %.3g Gbit/s, alpha %.3g us, compute scale %g, host "
              "%.3g ns/B; model fitted at %zu probe sizes per candidate\n",
              8e-9 / base.model.betaSPerByte, base.model.alphaS * 1e6, base.model.computeScale,
              base.model.hostSPerByte * 1e9, algo::autosel::probeLevels().size());
  std::printf("%5s %10s %-14s %13s %13s %9s\n", "P", "count", "candidate", "predicted_ms",
              "simulated_ms", "pred/sim");
  if (json) std::fprintf(json, "{\"tool\": \"gradcomp-sim --auto-check\", \"gbps\": %g, \"alpha_us\": %g, \"compute_scale\": %g, \"rows\": [\n",
                         8e-9 / base.model.betaSPerByte, base.model.alphaS * 1e6, base.model.computeScale);
  int failures = 0;
  const char* sep = "";
  for (int P : ranks) {
    AutoCheckResult r;
    Status s = autoCheck(base, P, counts, &r);
    if (!s.ok()) {
      std::fprintf(stderr, "gradcomp-sim --auto-check at P=%d: %s\n", P, s.toString().c_str());
      ++failures;
      continue;
    }
    for (const AutoCheckRow& row : r.rows) {
      for (size_t c = 0; c < r.labels.size(); ++c) {
        std::printf("%5d %10zu %-14s %13.3f %13.3f %9.2f\n", P, row.count, r.labels[c].c_str(),
                    row.predictedS[c] * 1e3, row.simulatedS[c] * 1e3,
                    row.predictedS[c] / row.simulatedS[c]);
        if (json)
          std::fprintf(json, "%s  {\"P\": %d, \"count\": %zu, \"candidate\": \"%s\", \"predicted_s\": %.9g, \"simulated_s\": %.9g}",
                       sep, P, row.count, r.labels[c].c_str(), row.predictedS[c], row.simulatedS[c]);
        sep = ",\n";
      }
      const size_t ch = size_t(row.chosen), b = size_t(row.best);
      std::printf("# P %d count %zu: the model chooses %s (simulated %.3f ms); best simulated %s "
                  "(%.3f ms): %.2fx\n",
                  P, row.count, r.labels[ch].c_str(), row.simulatedS[ch] * 1e3, r.labels[b].c_str(),
                  row.simulatedS[b] * 1e3, row.simulatedS[ch] / row.simulatedS[b]);
    }
  }
  if (json) {
    std::fprintf(json, "\n]}\n");
    std::fclose(json);
  }
  return failures ? 1 : 0;
}

}  // namespace gradcomp::sim
