// [gpu] The CUDA executor end to end, as the interposer drives it: P ranks
// (threads over the in-process transport), device buffers on a CUDA stream
// per rank, every call submitted with cudaExecutor()->submit and the stream
// synchronized only at the end (the calling thread never waits in between).
// Each algorithm's results must equal the same schedule on the CPU
// reference backend (test_gpu_algorithms' tolerances); asyncError stays Ok.
//
// main: tests/support/gpu_main.cc (exits 4, skipped, without a CUDA device).
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "algorithms/error_feedback.h"
#include "device/cuda/cuda_backend.h"
#include "plugin/nccl/executor.h"
#include "support/algo_runner.h"
#include "transport/local_transport.h"

using namespace gradcomp;

namespace {

// Rank threads record failures as a Status (Catch2 assertions are not
// thread-safe); the test thread checks them.
Status cudaOk(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return makeStatus(Err::SystemError, "%s: %s", what, cudaGetErrorString(e));
}

// A host function on the caller's stream that holds it (a GPU busy with
// the caller's earlier work).
void CUDART_CB holdStream(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms)));
}

// results[r][c] like testing::runRanks, through the CUDA executor. holdMs > 0:
// the stream is held that long before the first call, and *submitSeconds
// gets each rank's time spent in the submits (the calling thread must not
// wait for the held stream).
void runOnExecutor(const testing::AlgoRun& run,
                   std::vector<std::vector<std::vector<uint8_t>>>* results,
                   std::vector<Status>* rankStatus, int holdMs = 0,
                   std::vector<double>* submitSeconds = nullptr) {
  const algo::AlgorithmInfo* info = algo::findAlgorithm(run.algo);
  REQUIRE(info);
  nccl::Executor* exec = nccl::cudaExecutor();
  REQUIRE(exec);
  const int P = run.ranks;
  results->assign(P, {});
  rankStatus->assign(P, Status::Ok());
  auto nets = transport::createLocalTransports(P, 30.0);
  // Every rank's stream finishes before any rank releases its executor or
  // frees memory: those calls may synchronize the device, and another rank's
  // stream may still be parked on its last call (the proxy contract's rule).
  std::atomic<int> streamsDone{0};
  auto barrier = [&] {
    ++streamsDone;
    const auto t0 = std::chrono::steady_clock::now();
    while (streamsDone.load() < P &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      Status& st = (*rankStatus)[r];
      const size_t bytes = run.count * sizeof(float);
      cudaStream_t stream = nullptr;
      void *in = nullptr, *out = nullptr;
      st = cudaOk(cudaSetDevice(0), "cudaSetDevice");
      if (st.ok()) st = cudaOk(cudaStreamCreate(&stream), "cudaStreamCreate");
      if (st.ok()) st = cudaOk(cudaMalloc(&in, bytes * run.calls), "cudaMalloc");
      if (st.ok()) st = cudaOk(cudaMalloc(&out, bytes * run.calls), "cudaMalloc");
      auto alg = info->create();
      std::unique_ptr<algo::ErrorFeedbackStore> ef;
      if (st.ok()) st = algo::ErrorFeedbackStore::create(run.config, &ef);
      std::vector<float> values(run.count);
      // Inputs are staged from host memory first (pageable copies may wait
      // for the stream), then the held stream gets every call at once.
      std::vector<std::vector<float>> inputs(run.calls, std::vector<float>(run.count));
      for (int c = 0; c < run.calls; ++c)
        for (size_t i = 0; i < run.count; ++i) inputs[c][i] = testing::inputValue(r, c, i);
      if (st.ok() && holdMs > 0) {
        for (int c = 0; c < run.calls && st.ok(); ++c)
          st = cudaOk(cudaMemcpy(static_cast<char*>(in) + c * bytes, inputs[c].data(), bytes,
                                 cudaMemcpyHostToDevice), "input copy");
        static int hold = 0;
        hold = holdMs;
        if (st.ok()) st = cudaOk(cudaLaunchHostFunc(stream, holdStream, &hold), "cudaLaunchHostFunc");
      }
      const auto t0 = std::chrono::steady_clock::now();
      for (int c = 0; c < run.calls && st.ok(); ++c) {
        values = inputs[c];
        char* src = static_cast<char*>(in) + c * bytes;
        char* dst = static_cast<char*>(out) + c * bytes;
        // Stream-ordered input copies (pageable source: the copy is staged
        // before cudaMemcpyAsync returns); the collectives are asynchronous.
        if (holdMs == 0)
          st = cudaOk(cudaMemcpyAsync(src, values.data(), bytes, cudaMemcpyHostToDevice, stream),
                      "input copy");
        const bool inPlace = c % 2 == 1;
        if (st.ok() && inPlace)
          st = cudaOk(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
                      "in-place copy");
        if (!st.ok()) break;
        nccl::CompressedCall call;
        call.args.sendBuf = inPlace ? dst : src;
        call.args.recvBuf = dst;
        call.args.count = run.count;
        call.args.dtype = DataType::Float32;
        call.args.bufferKey = 11;
        call.algorithm = alg.get();
        call.net = nets[r].get();
        call.config = &run.config;
        call.callSeq = uint64_t(c);
        call.errorFeedback = ef.get();
        st = exec->submit(call, stream);
        int device = -1;
        if (st.ok()) st = cudaOk(cudaGetDevice(&device), "cudaGetDevice");
        if (st.ok() && device != 0)
          st = makeStatus(Err::Internal, "submit left device %d current (the caller had 0)", device);
      }
      if (submitSeconds)
        (*submitSeconds)[r] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (stream) {
        const Status sync = cudaOk(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        if (st.ok()) st = sync;
      }
      barrier();
      if (st.ok()) st = exec->asyncError(nets[r].get());
      std::vector<uint8_t> host(bytes);
      for (int c = 0; c < run.calls && st.ok(); ++c) {
        st = cudaOk(cudaMemcpy(host.data(), static_cast<char*>(out) + c * bytes, bytes,
                               cudaMemcpyDeviceToHost), "result copy");
        (*results)[r].push_back(host);
      }
      exec->release(nets[r].get(), false);
      if (in) cudaFree(in);
      if (out) cudaFree(out);
      if (stream) cudaStreamDestroy(stream);
    });
  for (auto& t : threads) t.join();
}

}  // namespace

TEST_CASE("gpu executor: every algorithm through cudaExecutor matches the CPU", "[gpu]") {
  for (const algo::AlgorithmInfo* info : algo::listAlgorithms())
    for (const testing::Variant& v : testing::variantsOf(info->name)) {
      DYNAMIC_SECTION(info->name << " " << v.label) {
        testing::AlgoRun run;
        run.algo = info->name;
        run.ranks = 3;
        run.count = (size_t(1) << 15) + 5;
        run.calls = 4;
        for (const auto& [name, value] : v.params)
          REQUIRE(run.config.set(name, value, "test").ok());
        std::vector<std::vector<std::vector<uint8_t>>> cpu, gpu;
        std::vector<Status> cpuSt, gpuSt;
        testing::runRanks(run, [](int) -> device::Backend& { return device::cpuBackend(); }, &cpu,
                          &cpuSt);
        runOnExecutor(run, &gpu, &gpuSt);
        testing::checkMatchesCpu(run, cpu, cpuSt, gpu, gpuSt);
      }
    }
}

TEST_CASE("gpu executor: the calling thread never waits for a busy stream", "[gpu]") {
  // Every call is submitted while the caller's stream is held for 2 s; the
  // results still match the CPU once the stream runs.
  testing::AlgoRun run;
  run.algo = "qsgd";
  run.ranks = 2;
  run.count = (size_t(1) << 14) + 3;
  run.calls = 3;  // below the executor's slot depth: no backpressure
  std::vector<std::vector<std::vector<uint8_t>>> cpu, gpu;
  std::vector<Status> cpuSt, gpuSt;
  testing::runRanks(run, [](int) -> device::Backend& { return device::cpuBackend(); }, &cpu,
                    &cpuSt);
  // The process's first backend (kernel preloading, the device's stack
  // limit: a device-wide synchronization) is made before the stream is held,
  // as a job's first call would find it (this case may run alone).
  {
    std::unique_ptr<device::CudaBackend> warm;
    REQUIRE(device::CudaBackend::create(0, &warm).ok());
  }
  std::vector<double> submitSeconds(run.ranks, 99.0);
  runOnExecutor(run, &gpu, &gpuSt, 2000, &submitSeconds);
  for (double s : submitSeconds) CHECK(s < 1.0);
  testing::checkMatchesCpu(run, cpu, cpuSt, gpu, gpuSt);
}

TEST_CASE("gpu executor: a call on the executor's private space, as the self-test makes it",
          "[gpu]") {
  // The self-test's device lane (plugin/nccl/selftest.cc): private device
  // buffers and stream on the application buffer's device, the call
  // submitted there, its outcome read after waitIdle, the result copied back.
  constexpr int P = 2;
  constexpr size_t n = (size_t(1) << 14) + 3;
  nccl::Executor* exec = nccl::cudaExecutor();
  REQUIRE(exec);
  const algo::AlgorithmInfo* info = algo::findAlgorithm("dense");
  REQUIRE(info);
  auto nets = transport::createLocalTransports(P, 30.0);
  std::vector<Status> status(P, Status::Ok());
  std::vector<std::vector<float>> out(P, std::vector<float>(n, -1.0f));
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      Status& st = status[size_t(r)];
      void* like = nullptr;
      st = cudaOk(cudaSetDevice(0), "cudaSetDevice");
      if (st.ok()) st = cudaOk(cudaMalloc(&like, 256), "cudaMalloc");
      std::unique_ptr<nccl::PrivateSpace> space;
      if (st.ok()) st = exec->makePrivateSpace(like, n * sizeof(float), n * sizeof(float), &space);
      std::vector<float> in(n);
      for (size_t i = 0; i < n; ++i) in[i] = float((i + size_t(r)) % 64);
      if (st.ok()) st = space->upload(in.data(), n * sizeof(float));
      auto alg = info->create();
      param::Overrides config;
      nccl::CompressedCall call;
      call.args.sendBuf = st.ok() ? space->send() : nullptr;
      call.args.recvBuf = st.ok() ? space->recv() : nullptr;
      call.args.count = n;
      call.args.dtype = DataType::Float32;
      call.algorithm = alg.get();
      call.net = nets[size_t(r)].get();
      call.config = &config;
      if (st.ok()) st = exec->submit(call, space->stream());
      if (st.ok()) st = exec->waitIdle(nets[size_t(r)].get());
      if (st.ok()) st = space->download(out[size_t(r)].data(), n * sizeof(float));
      exec->release(nets[size_t(r)].get(), false);
      space.reset();
      if (like) cudaFree(like);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r << ": " << status[size_t(r)].toString());
    REQUIRE(status[size_t(r)].ok());
    for (size_t i = 0; i < n; ++i) {
      const float want = float(i % 64) + float((i + 1) % 64);  // small integers: exact
      if (out[size_t(r)][i] != want) FAIL("element " << i << " is " << out[size_t(r)][i] << ", expected " << want);
    }
  }
}
