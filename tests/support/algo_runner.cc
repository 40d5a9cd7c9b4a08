#include "support/algo_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <catch2/catch.hpp>
#include <memory>
#include <thread>

#include "algorithms/call_budget.h"
#include "algorithms/error_feedback.h"
#include "algorithms/hierarchy/hierarchical.h"
#include "device/arrays.h"
#include "transport/local_transport.h"

namespace gradcomp::testing {

void runRanks(const AlgoRun& run, const std::function<device::Backend&(int rank)>& backendOf,
              std::vector<std::vector<std::vector<uint8_t>>>* results,
              std::vector<Status>* rankStatus) {
  const algo::AlgorithmInfo* info = algo::findAlgorithm(run.algo);
  const int P = run.ranks;
  results->assign(P, {});
  rankStatus->assign(P, info ? Status::Ok()
                             : makeStatus(Err::InvalidArgument, "no algorithm '%s'",
                                          run.algo.c_str()));
  if (!info) return;
  auto nets = transport::createLocalTransports(P, 30.0);
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      Status& st = (*rankStatus)[r];
      device::Backend& dev = backendOf(r);
      size_t most = run.count;
      for (size_t n : run.counts) most = std::max(most, n);
      const size_t capacity = most * dtypeSize(run.dtype);
      // The call's buffers are device memory, as a framework's tensors are;
      // inputs and results move through host memory with backend copies.
      device::DeviceArray<uint8_t> in(dev, capacity), out(dev, capacity);
      device::HostArray<float> values(dev, most);
      device::HostArray<uint8_t> host(dev, capacity);
      std::unique_ptr<algo::ErrorFeedbackStore> ef;
      std::unique_ptr<algo::Algorithm> alg = info->create();
      if (!run.hosts.empty()) alg = algo::hierarchy::makeHierarchical(std::move(alg), run.hosts);
      algo::CallBudget budget;
      st = algo::ErrorFeedbackStore::create(run.config, &ef);
      for (int c = 0; c < run.calls && st.ok(); ++c) {
        const size_t count = run.counts.empty() ? run.count : run.counts[c % run.counts.size()];
        const size_t bytes = count * dtypeSize(run.dtype);
        for (size_t i = 0; i < count; ++i) values[i] = inputValue(r, c, i);
        if (c == run.nanCall && r == 0 && count > 1) values[1] = std::nanf("");
        st = dev.convert(host.data(), run.dtype, values.data(), DataType::Float32, count);
        if (st.ok()) st = dev.copy(in.data(), host.data(), bytes);
        const bool inPlace = c % 2 == 1;
        if (st.ok() && inPlace) st = dev.copy(out.data(), in.data(), bytes);
        if (st.ok()) st = dev.sync();
        if (!st.ok()) break;
        algo::Context ctx{*nets[r], dev, run.config, uint64_t(c), ef.get()};
        algo::AllreduceArgs a;
        a.sendBuf = inPlace ? out.data() : in.data();
        a.recvBuf = out.data();
        a.count = count;
        a.coll = run.coll;
        size_t outBytes = bytes;
        if (run.coll == algo::Collective::ReduceScatter) {
          outBytes = bytes / size_t(P);
          if (inPlace) a.recvBuf = out.data() + size_t(r) * outBytes;
        }
        a.dtype = run.dtype;
        a.bufferKey = 11 + count;
        if (run.throughBudget) {
          algo::CallBudget::Reservation promise;
          st = budget.prepare(*alg, run.algo, ctx, a, &promise);
          if (st.ok()) st = budget.run(*alg, run.algo, ctx, a, promise);
        } else {
          st = algo::runCollective(*alg, ctx, a);
        }
        if (!st.ok()) break;
        st = dev.copy(host.data(), a.recvBuf, outBytes);
        if (st.ok()) st = dev.sync();
        (*results)[r].emplace_back(host.begin(), host.begin() + outBytes);
      }
      // Algorithm scratch and residuals go back to dev before the arrays above.
      alg.reset();
      ef.reset();
      (void)dev.sync();
    });
  for (auto& t : threads) t.join();
}

std::vector<Variant> variantsOf(const std::string& algo) {
  if (algo == "oktopk" || algo == "gtopk" || algo == "topka" || algo == "dsa" || algo == "cltk" ||
      algo == "gaussiank")
    return {{"d=0.01 tau'=2", {{"DENSITY", "0.01"}, {"TOPK_TAU_PRIME", "2"}, {"TOPK_TAU", "3"}}},
            {"d=0.3", {{"DENSITY", "0.3"}}}};
  if (algo == "qsgd")
    return {{"bits=4", {{"BITS", "4"}}},
            {"bits=1", {{"BITS", "1"}}},
            {"bits=4 no owner EF", {{"BITS", "4"}, {"QUANT_OWNER_EF", "0"}}}};
  if (algo == "rbf")
    return {{"bits=10", {{"BITS", "10"}}}, {"owner EF", {{"QUANT_OWNER_EF", "1"}}}};
  if (algo == "wagma") return {{"blocking", {{"WAGMA_WAIT", "1"}, {"WAGMA_PERIOD", "2"}}}};
  return {{"defaults", {}}};
}

namespace {

double fp32At(const std::vector<uint8_t>& bytes, size_t i) {
  float f;
  std::memcpy(&f, bytes.data() + 4 * i, 4);
  return f;
}

}  // namespace

void checkMatchesCpu(const AlgoRun& run, const std::vector<std::vector<std::vector<uint8_t>>>& cpu,
                     const std::vector<Status>& cpuStatus,
                     const std::vector<std::vector<std::vector<uint8_t>>>& gpu,
                     const std::vector<Status>& gpuStatus) {
  for (int r = 0; r < run.ranks; ++r) {
    INFO(run.algo << " rank " << r << ": cpu " << cpuStatus[r].toString() << ", gpu "
                  << gpuStatus[r].toString());
    REQUIRE(cpuStatus[r].ok());
    REQUIRE(gpuStatus[r].ok());
    REQUIRE(cpu[r].size() == size_t(run.calls));
    REQUIRE(gpu[r].size() == size_t(run.calls));
    const size_t n = run.coll == algo::Collective::ReduceScatter ? run.count / size_t(run.ranks)
                                                                  : run.count;
    for (int c = 0; c < run.calls; ++c) {
      double scale = 0;
      for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(fp32At(cpu[r][c], i)));
      size_t bad = 0, first = 0;
      double worst = 0;
      for (size_t i = 0; i < n; ++i) {
        const double a = fp32At(cpu[r][c], i), d = std::fabs(a - fp32At(gpu[r][c], i));
        const double tol = run.algo == "fft" ? 1e-3 * (1 + scale) : 1e-5 * (1 + std::fabs(a));
        if (!(d <= tol)) {
          if (bad++ == 0) first = i;
          worst = std::isnan(d) ? d : std::max(worst, d);
        }
      }
      INFO("call " << c << ": " << bad << " of " << n << " elements differ (first "
                   << first << ", worst |diff| " << worst << ")");
      CHECK(bad == 0);
    }
  }
}

}  // namespace gradcomp::testing
