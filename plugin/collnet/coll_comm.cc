#include "plugin/collnet/coll_comm.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"
#include "device/backend.h"

namespace gradcomp::collnet {

struct CollComm::Job {
  CollComm* comm = nullptr;
  Chunk chunk;
  enum State { Queued, Done, Failed };
  std::atomic<int> state{Queued};
  Status status;  // written before state leaves Queued
};

namespace {

std::atomic<uint64_t> gNextGroup{0};

}  // namespace

CollComm::CollComm(Setup setup)
    : rank_(setup.rank), nranks_(setup.nranks), net_(std::move(setup.net)),
      config_(std::move(setup.config)), keys_(setup.efPeriod) {
  stats_.id = gNextGroup.fetch_add(1);
  stats_.rank = rank_;
  stats_.nranks = nranks_;
  stats_.algo = setup.algoName;
  stats_.wiringSeconds = setup.wiringSeconds;
}

Status CollComm::create(Setup setup, std::unique_ptr<CollComm>* out) {
  const algo::AlgorithmInfo* info = algo::findAlgorithm(setup.algoName);
  GC_REQUIRE(info != nullptr, Err::InvalidConfig, "CollNet: algorithm '%s' is not registered",
             setup.algoName.c_str());
  GC_REQUIRE(setup.net && setup.net->size() == setup.nranks && setup.net->rank() == setup.rank,
             Err::Internal, "CollNet: transport does not match rank %d of %d", setup.rank,
             setup.nranks);
  const uint64_t period = setup.efPeriod;
  std::unique_ptr<CollComm> c(new CollComm(std::move(setup)));
  c->algorithm_ = info->create();
  c->info_ = info;
  if (period > 0) {
    // A key comes back once per step, `period` calls later: it must outlive
    // that (GRADCOMP_EF_RETIRE_CALLS counts CollNet chunks here).
    param::Overrides ef = c->config_;
    int64_t retire = 0;
    GC_CHECK(ef.getInt(param::Id::EF_RETIRE_CALLS, &retire));
    const uint64_t least = std::min<uint64_t>(2 * period, 1000000000);
    if (uint64_t(retire) < least)
      GC_CHECK(ef.set("EF_RETIRE_CALLS", std::to_string(least), "CollNet: 2 x GRADCOMP_COLLNET_EF_PERIOD"));
    GC_CHECK(algo::ErrorFeedbackStore::create(ef, &c->errorFeedback_));
  }
  c->worker_ = std::thread([p = c.get()] { p->run(); });
  *out = std::move(c);
  return Status::Ok();
}

CollComm::~CollComm() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (Job* j : queue_) {
      j->status = makeStatus(Err::InvalidArgument, "CollNet: closeColl while this chunk was still queued");
      j->state.store(Job::Failed);
    }
    queue_.clear();
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  for (Job* j : jobs_) delete j;  // requests NCCL never tested to the end
  GroupStats s = stats();
  s.closed = true;
  update(s);
  GC_INFO(NET, "%s", statsLine(s).c_str());
  (void)write();
}

Status CollComm::submit(const Chunk& chunk, void** request) {
  *request = nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed_.ok()) return failed_;
  GC_REQUIRE(!stopping_, Err::Internal, "CollNet: iallreduce on a closed group");
  if (queue_.size() >= kMaxInFlight) return Status::Ok();
  auto* job = new Job();
  job->comm = this;
  job->chunk = chunk;
  jobs_.insert(job);
  queue_.push_back(job);
  cv_.notify_one();
  *request = job;
  return Status::Ok();
}

Status CollComm::test(void* request, bool* done, size_t* bytes) {
  auto* job = static_cast<Job*>(request);
  *done = false;
  const int state = job->state.load(std::memory_order_acquire);
  if (state == Job::Queued) return Status::Ok();
  Status s = job->status;
  if (bytes) *bytes = job->chunk.count * dtypeSize(job->chunk.dtype);
  job->comm->release(job);
  *done = s.ok();
  return s;
}

void CollComm::release(Job* job) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.erase(job);
  delete job;
}

GroupStats CollComm::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CollComm::run() {
  while (true) {
    Job* job = nullptr;
    Status prior;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      job = queue_.front();
      queue_.pop_front();
      prior = failed_;
    }
    Status s = prior.ok() ? runChunk(job->chunk) : prior;
    if (!s.ok() && prior.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      failed_ = s;
      stats_.failed = s.toString();
      GC_WARN("CollNet group #%llu rank %d/%d: chunk %llu failed: %s; this and every later "
              "chunk of the group fail", (unsigned long long)stats_.id, rank_, nranks_,
              (unsigned long long)callSeq_, s.toString().c_str());
    }
    job->status = s;
    job->state.store(s.ok() ? Job::Done : Job::Failed, std::memory_order_release);
  }
}

Status CollComm::runChunk(const Chunk& c) {
  const uintptr_t base = c.sendReg ? uintptr_t(c.sendReg->base) : 0;
  SlotState slot = SlotState::New;
  const uint64_t key = keys_.key(callSeq_, c.count, c.dtype, base, uintptr_t(c.send) - base, &slot);
  algo::ErrorFeedbackStore* ef =
      errorFeedback_ && errorFeedback_->enabled() ? errorFeedback_.get() : nullptr;
  if (ef && slot == SlotState::Moved) GC_CHECK(ef->clear(device::cpuBackend(), key));
  algo::Context ctx{*net_, device::cpuBackend(), config_, callSeq_, ef};
  algo::AllreduceArgs args;
  args.sendBuf = c.send;
  args.recvBuf = c.recv;
  args.count = c.count;
  args.dtype = c.dtype;
  args.op = c.op;
  args.bufferKey = key;
  const uint64_t sent = net_->totalCounters().bytesSent;
  const double waited = net_->waitSeconds();
  const auto start = std::chrono::steady_clock::now();
  net_->setActivity(info_->name.c_str());
  algo::CallBudget::Reservation promise;
  Status s = budget_.prepare(*algorithm_, info_->name, ctx, args, &promise);
  if (s.ok()) {
    const algo::CallSignature sig = algo::callSignature(*info_, config_, callSeq_, args);
    s = budget_.run(*algorithm_, info_->name, ctx, args, promise, &sig);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++callSeq_;
  if (ef && callSeq_ % keys_.period() == 0) ef->retireStale(callSeq_);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.seconds += seconds;
  stats_.waitSeconds += std::max(0.0, net_->waitSeconds() - waited);
  stats_.wireBytes += net_->totalCounters().bytesSent - sent;
  if (!s.ok()) return s;
  stats_.calls += 1;
  stats_.logicalBytes += c.count * dtypeSize(c.dtype);
  if (ef && slot == SlotState::Same) stats_.efReused += 1;
  if (ef && slot == SlotState::Moved) stats_.efRestarts += 1;
  return s;
}

}  // namespace gradcomp::collnet
