// Test harness for the quantized family: runs an algorithm on P threads over
// the local transport (one residual store and one algorithm object per rank,
// like a communicator) for a sequence of calls, and records every rank's
// output and bytes sent per call. Header-only; used by test_quant_*.cc.
#pragma once

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/error_feedback.h"
#include "transport/local_transport.h"

namespace gradcomp::test {

using Buffers = std::vector<std::vector<float>>;  // [rank][element]

struct LocalRun {
  std::vector<Buffers> out;                   // [call][rank][element]
  std::vector<std::vector<uint64_t>> sent;    // [call][rank] bytes sent
  std::vector<Status> status;                 // [rank] first error
  bool ok() const {
    for (const Status& s : status)
      if (!s.ok()) return false;
    return true;
  }
  std::string firstError() const {
    for (const Status& s : status)
      if (!s.ok()) return s.toString();
    return "";
  }
};

inline LocalRun runLocal(const std::string& algoName, const param::Overrides& config,
                         const std::vector<Buffers>& inputs, RedOp op, uint64_t key = 7) {
  const size_t calls = inputs.size();
  const int P = int(inputs.at(0).size());
  LocalRun run;
  run.out.assign(calls, Buffers(P));
  run.sent.assign(calls, std::vector<uint64_t>(P, 0));
  run.status.assign(P, Status::Ok());
  const algo::AlgorithmInfo* info = algo::findAlgorithm(algoName);
  if (!info) {
    run.status[0] = makeStatus(Err::InvalidArgument, "no algorithm %s", algoName.c_str());
    return run;
  }
  auto nets = transport::createLocalTransports(P, 30.0);
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<algo::ErrorFeedbackStore> store;
      Status s = algo::ErrorFeedbackStore::create(config, &store);
      std::unique_ptr<algo::Algorithm> algo = info->create();
      for (size_t c = 0; c < calls && s.ok(); ++c) {
        algo::Context ctx{*nets[r], device::cpuBackend(), config, uint64_t(c)};
        ctx.errorFeedback = store.get();
        algo::AllreduceArgs args;
        const size_t n = inputs[c][r].size();
        run.out[c][r].assign(n, std::nanf("0x55"));
        args.sendBuf = inputs[c][r].data();
        args.recvBuf = run.out[c][r].data();
        args.count = n;
        args.op = op;
        args.bufferKey = key;
        const uint64_t before = nets[r]->totalCounters().bytesSent;
        s = algo->allreduce(ctx, args);
        run.sent[c][r] = nets[r]->totalCounters().bytesSent - before;
      }
      run.status[r] = s;
    });
  for (auto& t : threads) t.join();
  return run;
}

// The reference's expectation for each call (same inputs, same order).
inline Status referenceRun(algo::Reference& ref, const std::vector<Buffers>& inputs, RedOp op,
                           std::vector<std::vector<double>>* expected, uint64_t key = 7) {
  expected->clear();
  for (const Buffers& call : inputs) {
    std::vector<const void*> ptrs;
    for (const auto& b : call) ptrs.push_back(b.data());
    algo::AllreduceArgs args;
    args.count = call[0].size();
    args.op = op;
    args.bufferKey = key;
    std::vector<double> e, tol;
    GC_CHECK(ref.expect(ptrs, args, &e, &tol));
    expected->push_back(e);
  }
  return Status::Ok();
}

// Bitwise float equality (NaN equals NaN, -0 differs from 0).
inline bool sameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace gradcomp::test
