// The public C API (include/gradcomp/gradcomp.h). Every entry point validates
// its arguments, runs its body inside guard() (no exception crosses the C
// boundary) and reports through toResult(), which records gcLastError().
#include <cstring>
#include <exception>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <new>

#include "algorithms/auto/auto_algorithm.h"
#include "algorithms/call_check.h"
#include "algorithms/hierarchy/hierarchical.h"
#include "common/log.h"
#include "device/arrays.h"
#include "device/backend.h"
#include "device/cpu/cpu_device_backend.h"
#include "gradcomp/gradcomp.h"
#include "plugin/api/comm.h"
#include "plugin/nccl/policy.h"
#include "transport/ucx_transport.h"

namespace gradcomp::api {
namespace {

template <class F>
gcResult_t guard(const char* fn, F&& body) {
  Status s;
  try {
    s = body();
  } catch (const std::bad_alloc&) {
    s = makeStatus(Err::SystemError, "%s: out of memory", fn);
  } catch (const std::exception& e) {
    s = makeStatus(Err::Internal, "%s: unexpected exception: %s", fn, e.what());
  } catch (...) {
    s = makeStatus(Err::Internal, "%s: unexpected exception", fn);
  }
  return static_cast<gcResult_t>(toResult(s));
}

// Wires a communicator over `bootstrap` (rank and size in info): UCX
// endpoints, the agreed topology, the backend, the residual store.
Status finishInit(const transport::LaunchInfo& info,
                  std::unique_ptr<transport::AddressExchange> bootstrap, gcComm_t* out) {
  auto comm = std::make_unique<gcComm>();
  comm->bootstrap = std::move(bootstrap);
  GC_CHECK(transport::createUcxTransport(*comm->bootstrap, transport::UcxOptions{}, &comm->net));
  GC_CHECK(transport::discoverTopology(*comm->net, &comm->topology));
  std::string backend;
  GC_CHECK(param::getString(param::Id::API_BACKEND, &backend));
  if (backend == "cpu-device") {
    comm->ownedDev = device::makeCpuDeviceBackend();
    comm->dev = comm->ownedDev.get();
  } else {
    comm->dev = &device::cpuBackend();
  }
  GC_CHECK(algo::ErrorFeedbackStore::createForCommunicator(&comm->errorFeedback));
  GC_INFO(INIT, "communicator ready: rank %d of %d (%s), %s backend", info.rank, info.size,
          info.source.c_str(), comm->dev->name());
  *out = comm.release();
  return Status::Ok();
}

Status initFromEnv(gcComm_t* out) {
  GC_REQUIRE(out, Err::InvalidArgument, "gcCommInitFromEnv: comm pointer is NULL");
  *out = nullptr;
  GC_CHECK(param::validateEnvironment());
  transport::LaunchInfo info;
  GC_CHECK(transport::launchInfoFromEnvironment(&info));
  log::setRank(info.rank);
  std::unique_ptr<transport::AddressExchange> bootstrap;
  GC_CHECK(transport::createUcxBootstrap(info, &bootstrap));
  return finishInit(info, std::move(bootstrap), out);
}

// Listeners gcGetUniqueId opened, by the id's text, until rank 0's
// gcCommInitRank takes its own (NCCL's ncclGetUniqueId starts its root the
// same way). An id that never reaches gcCommInitRank keeps its listener
// until the process exits.
std::mutex gPendingMu;
std::map<std::string, std::unique_ptr<transport::RendezvousListener>>& pendingListeners() {
  static auto* m = new std::map<std::string, std::unique_ptr<transport::RendezvousListener>>();
  return *m;
}

std::string idText(const gcUniqueId& id) {
  return std::string(id.internal, strnlen(id.internal, sizeof id.internal));
}

Status getUniqueId(const char* host, gcUniqueId* id) {
  GC_REQUIRE(id, Err::InvalidArgument, "gcGetUniqueId: id is NULL");
  GC_CHECK(param::validateEnvironment());
  const std::string h = host && *host ? host : "127.0.0.1";
  std::unique_ptr<transport::RendezvousListener> listener;
  GC_CHECK(transport::listenUcxRendezvous(h, &listener));
  const std::string text = h + ":" + std::to_string(listener->port());
  GC_REQUIRE(text.size() < sizeof id->internal, Err::InvalidArgument,
             "gcGetUniqueId: host '%s' is longer than a gcUniqueId holds (%zu bytes)", h.c_str(),
             sizeof id->internal - 8);
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, text.data(), text.size());
  std::lock_guard<std::mutex> lock(gPendingMu);
  pendingListeners()[text] = std::move(listener);
  return Status::Ok();
}

Status initRank(gcComm_t* out, int nranks, const gcUniqueId* id, int rank) {
  GC_REQUIRE(out, Err::InvalidArgument, "gcCommInitRank: comm pointer is NULL");
  *out = nullptr;
  GC_REQUIRE(id, Err::InvalidArgument, "gcCommInitRank: id is NULL");
  GC_REQUIRE(nranks >= 1 && rank >= 0 && rank < nranks, Err::InvalidArgument,
             "gcCommInitRank: rank %d of %d ranks is not a valid rank", rank, nranks);
  const std::string text = idText(*id);
  const size_t colon = text.rfind(':');
  char* end = nullptr;
  const long port = colon == std::string::npos ? -1 : std::strtol(text.c_str() + colon + 1, &end, 10);
  GC_REQUIRE(colon != std::string::npos && colon > 0 && end && *end == '\0' && port > 0 &&
                 port < 65536,
             Err::InvalidArgument,
             "gcCommInitRank: id '%s' is not host:port (an id from gcGetUniqueId on rank 0)",
             text.c_str());
  GC_CHECK(param::validateEnvironment());
  transport::LaunchInfo info;
  info.rank = rank;
  info.size = nranks;
  info.host = text.substr(0, colon);
  if (info.host.size() > 2 && info.host.front() == '[' && info.host.back() == ']')
    info.host = info.host.substr(1, info.host.size() - 2);
  info.port = int(port);
  info.source = "gcCommInitRank";
  info.addressSource = "the gcUniqueId of rank 0 (gcGetUniqueId)";
  log::setRank(rank);
  std::unique_ptr<transport::RendezvousListener> listener;
  if (rank == 0) {
    std::lock_guard<std::mutex> lock(gPendingMu);
    auto it = pendingListeners().find(text);
    if (it != pendingListeners().end()) {
      listener = std::move(it->second);
      pendingListeners().erase(it);
    }
  }
  std::unique_ptr<transport::AddressExchange> bootstrap;
  if (listener)
    GC_CHECK(transport::joinUcxRendezvous(std::move(listener), info, &bootstrap));
  else  // another process's id, or one written by hand: rank 0 listens at host:port
    GC_CHECK(transport::createUcxBootstrap(info, &bootstrap));
  return finishInit(info, std::move(bootstrap), out);
}

Status destroy(gcComm_t comm) {
  if (!comm) return Status::Ok();
  std::unique_ptr<gcComm> owned(comm);
  // Wait until every rank is here before tearing endpoints down, so no peer
  // still expects traffic from us. The barrier runs on the transport, so it
  // shares its deadline and failure handling: on a communicator that already
  // failed it returns that failure at once, and a rank that dies meanwhile
  // ends it through the failure monitor. A failure is reported, the resources
  // are released anyway.
  Status barrier;
  if (owned->net) {
    owned->net->setActivity("gcCommDestroy");
    barrier = owned->net->barrier();
  }
  if (!barrier.ok() && owned->bootstrap) owned->bootstrap->abandon();
  owned->algorithms.clear();
  owned->errorFeedback.reset();
  if (owned->dev) (void)owned->dev->sync();  // deferred releases
  owned->budget.release();  // signatures still posted on net (wait-avoiding calls)
  owned->net.reset();
  owned->bootstrap.reset();
  return barrier;
}

Status configCreate(const char* algo, gcAlgoConfig_t* out) {
  GC_REQUIRE(out, Err::InvalidArgument, "gcAlgoConfigCreate: config pointer is NULL");
  *out = nullptr;
  GC_REQUIRE(algo, Err::InvalidArgument, "gcAlgoConfigCreate: algorithm name is NULL (known: %s)",
             algo::algorithmNames().c_str());
  const algo::AlgorithmInfo* info = algo::findAlgorithm(algo);
  if (!info) info = algo::findAllgatherAlgorithm(algo);  // blockq, cast: gcAllgather only
  GC_REQUIRE(info, Err::InvalidArgument,
             "gcAlgoConfigCreate: unknown algorithm '%s' (known: %s; for gcAllgather: %s)", algo,
             algo::algorithmNames().c_str(), algo::allgatherNames().c_str());
  auto config = std::make_unique<gcAlgoConfig>();
  config->info = info;
  *out = config.release();
  return Status::Ok();
}

// Only parameters the algorithm declares are accepted: a typo or a parameter
// of another algorithm would otherwise be silently ignored.
Status configSet(gcAlgoConfig_t config, const char* name, const char* value) {
  GC_REQUIRE(config, Err::InvalidArgument, "gcAlgoConfigSet: config is NULL");
  GC_REQUIRE(name && value, Err::InvalidArgument, "gcAlgoConfigSet: %s is NULL",
             name ? "value" : "param");
  std::string accepted;
  bool declared = false;
  for (param::Id id : config->info->params) {
    const char* p = param::spec(id).name;
    declared = declared || std::strcmp(p, name) == 0;
    accepted += accepted.empty() ? p : std::string(", ") + p;
  }
  GC_REQUIRE(declared, Err::InvalidConfig,
             "gcAlgoConfigSet: '%s' is not a parameter of algorithm '%s' (accepted: %s; names "
             "without the GRADCOMP_ prefix)",
             name, config->info->name.c_str(), accepted.empty() ? "none" : accepted.c_str());
  return config->overrides.set(name, value, std::string("gcAlgoConfigSet(") + name + ")");
}

bool knownDtype(int t) {
  return t == gcInt32 || t == gcInt64 || t == gcFloat16 || t == gcFloat32 || t == gcFloat64 ||
         t == gcBfloat16;
}

// gcAllreduce, gcReduceScatter (count: the whole input, recvcount x P) and
// gcAllgather (count: the whole output, sendcount x P).
Status collective(algo::Collective coll, const void* sendbuf, void* recvbuf, size_t count,
                  int dtype, int op, gcAlgoConfig_t config, uint64_t bufferKey, gcComm_t comm) {
  const bool rs = coll == algo::Collective::ReduceScatter;
  const bool ag = coll == algo::Collective::AllGather;
  const char* fn = rs ? "gcReduceScatter" : ag ? "gcAllgather" : "gcAllreduce";
  GC_REQUIRE(comm, Err::InvalidArgument, "%s: comm is NULL", fn);
  GC_REQUIRE(knownDtype(dtype), Err::InvalidArgument,
             "%s: dtype %d is invalid: expected gcInt32 (2), gcInt64 (4), gcFloat16 (6), "
             "gcFloat32 (7), gcFloat64 (8) or gcBfloat16 (9)",
             fn, dtype);
  GC_REQUIRE(op == gcSum || op == gcAvg, Err::InvalidArgument,
             "%s: op %d is invalid: expected gcSum (0) or gcAvg (4)", fn, op);
  const size_t esz = dtypeSize(DataType(dtype));
  GC_REQUIRE(count <= std::numeric_limits<size_t>::max() / esz, Err::InvalidArgument,
             "%s: count %zu of %s overflows the byte size", fn, count,
             dtypeName(DataType(dtype)));
  GC_REQUIRE(count == 0 || (sendbuf && recvbuf), Err::InvalidArgument,
             "%s: %s is NULL with count %zu", fn, sendbuf ? "recvbuf" : "sendbuf", count);
  GC_REQUIRE(comm->net, Err::InvalidArgument, "%s: comm is not initialized", fn);
  {
    // The layout rules (NCCL's) are algo::checkCallArgs', for both collectives.
    algo::AllreduceArgs shape;
    shape.sendBuf = sendbuf, shape.recvBuf = recvbuf, shape.count = count;
    shape.dtype = DataType(dtype);
    shape.op = op == gcAvg ? RedOp::Avg : RedOp::Sum;
    shape.coll = coll;
    Status layout = algo::checkCallArgs(shape, comm->net->size(), comm->net->rank());
    const std::string prefix = rs ? "reduce-scatter: " : ag ? "allgather: " : "allreduce: ";
    const std::string& why = layout.message();
    GC_REQUIRE(layout.ok(), Err::InvalidArgument, "%s: %s", fn,
               why.c_str() + (why.compare(0, prefix.size(), prefix) == 0 ? prefix.size() : 0));
  }

  static const gcAlgoConfig kDense = [] {
    gcAlgoConfig c;
    c.info = algo::findAlgorithm("dense");
    return c;
  }();
  const gcAlgoConfig& cfg = config ? *config : kDense;  // NULL: dense, environment defaults
  GC_REQUIRE(cfg.info, Err::Internal, "%s: algorithm 'dense' is not registered", fn);
  GC_REQUIRE(!rs || cfg.info->hasReduceScatter(), Err::Unsupported,
             "gcReduceScatter: algorithm '%s' has no reduce-scatter form", cfg.info->name.c_str());
  // An allgather runs the allgather registry's entry of that name (dense,
  // cast, blockq); an allreduce or reduce-scatter never runs one of those.
  const algo::AlgorithmInfo* info = cfg.info;
  if (ag) {
    info = algo::findAllgatherAlgorithm(cfg.info->name);
    GC_REQUIRE(info, Err::Unsupported, "gcAllgather: algorithm '%s' has no allgather form "
               "(those with one: %s)", cfg.info->name.c_str(), algo::allgatherNames().c_str());
  } else {
    GC_REQUIRE(algo::findAlgorithm(info->name) == info, Err::Unsupported,
               "%s: algorithm '%s' is an allgather only (gcAllgather)", fn, info->name.c_str());
  }
  // A reduce-scatter runs its own instance (its residuals are the whole
  // input's), hierarchical like the allreduce's where the topology is.
  std::unique_ptr<algo::Algorithm>& instance =
      comm->algorithms[rs ? cfg.info->name + "/reducescatter"
                       : ag ? cfg.info->name + "/allgather" : cfg.info->name];
  if (!instance && ag) {
    instance = info->create();
    if (comm->topology.hierarchical)  // every allgather schedule has the form
      instance = algo::hierarchy::makeHierarchical(std::move(instance), comm->topology.hostRanks);
  } else if (!instance) {
    instance = cfg.info->create();
    if (comm->topology.hierarchical && algo::hierarchy::supportsHierarchy(*cfg.info))
      instance = algo::hierarchy::makeHierarchical(std::move(instance), comm->topology.hostRanks);
    else if (comm->topology.hierarchical)
      GC_INFO(ALGO, "%s runs flat over all ranks: it has no hierarchical form",
              cfg.info->name.c_str());
  }

  algo::AllreduceArgs args;
  args.sendBuf = sendbuf;
  args.recvBuf = recvbuf;
  args.count = count;
  args.dtype = DataType(dtype);
  args.op = ag ? RedOp::Sum : RedOp(op);
  args.bufferKey = bufferKey;  // 0: keyed by shape, residuals by recvbuf (algorithm.h)
  args.coll = coll;
  algo::Context ctx{*comm->net, *comm->dev, cfg.overrides, comm->callSeq++};
  comm->net->setActivity(cfg.info->name.c_str());
  // The call's GRADCOMP_EF (config override, else registry) decides.
  if (!ag)
    GC_CHECK(algo::ErrorFeedbackStore::forCall(comm->errorFeedback.get(), cfg.overrides,
                                               &ctx.errorFeedback));
  GC_TRACE(ALGO, "%s #%llu: %s, %zu x %s, %s", fn, (unsigned long long)ctx.callSeq,
           cfg.info->name.c_str(), count, dtypeName(args.dtype), redOpName(args.op));
  // As the CUDA executor runs it: prepared and reserved on the calling
  // thread, then run with the backend parked (algorithms/call_budget.h),
  // signatures checked and a failure here made every rank's (call_check.h).
  const algo::CallSignature sig = algo::callSignature(*info, cfg.overrides, ctx.callSeq, args);
  algo::CallBudget::Reservation promise;
  GC_CHECK(comm->budget.prepare(*instance, cfg.info->name, ctx, args, &promise));
  GC_CHECK(comm->budget.run(*instance, cfg.info->name, ctx, args, promise, &sig));
  const auto* selector = dynamic_cast<const algo::autosel::AutoAlgorithm*>(instance.get());
  comm->lastAlgorithm = selector ? selector->lastChoice() : cfg.info->name;
  return Status::Ok();
}

// gcCommPolicyConfig. The first call loads the policy and compares its
// effective text over the bootstrap (collective), as the interposer's wiring
// does; a difference fails every rank (they all saw the same texts).
Status policyConfig(gcComm_t comm, size_t count, int dtype, int op, gcAlgoConfig_t* out,
                    const char** why) {
  GC_REQUIRE(out, Err::InvalidArgument, "gcCommPolicyConfig: config pointer is NULL");
  *out = nullptr;
  if (why) *why = "";
  GC_REQUIRE(comm && comm->net && comm->bootstrap, Err::InvalidArgument,
             "gcCommPolicyConfig: comm is NULL or not initialized");
  nccl::CommIdentity id;
  id.nranks = comm->net->size();
  if (!comm->policy) {
    auto policy = std::make_shared<nccl::Policy>();
    GC_CHECK(nccl::loadPolicy(policy.get()));
    std::vector<std::string> texts;
    comm->net->setActivity("gcCommPolicyConfig");
    GC_CHECK(comm->bootstrap->allgather(nccl::effectiveConfigText(*policy, id, true), &texts));
    const std::string diff = nccl::firstDifference(texts);
    GC_REQUIRE(diff.empty(), Err::InvalidConfig,
               "gcCommPolicyConfig: the gradcomp configuration differs across ranks: %s",
               diff.c_str());
    comm->policy = std::move(policy);
  }
  const nccl::Policy& policy = *comm->policy;
  nccl::CallShape call;
  call.count = count, call.ncclDtype = dtype, call.ncclOp = op;
  int rule = -1;
  const nccl::Verdict verdict = nccl::decide(policy, id, call, &rule);
  if (why) *why = nccl::verdictName(verdict);
  if (verdict != nccl::Verdict::Compress) return Status::Ok();
  const nccl::Rule* r = rule >= 0 ? &policy.rules[size_t(rule)] : nullptr;
  const std::string name = r && !r->algo.empty() ? r->algo : policy.algo;
  gcAlgoConfig_t config = nullptr;
  GC_CHECK(configCreate(name.c_str(), &config));
  std::unique_ptr<gcAlgoConfig> owned(config);
  GC_CHECK(nccl::algorithmOverrides(policy, rule, &owned->overrides));
  *out = owned.release();
  return Status::Ok();
}

Status memCopy(gcComm_t comm, void* dst, const void* src, size_t bytes, bool toDevice,
               const char* fn) {
  GC_REQUIRE(comm && comm->dev, Err::InvalidArgument, "%s: comm is NULL", fn);
  GC_REQUIRE(bytes == 0 || (dst && src), Err::InvalidArgument, "%s: %s is NULL", fn,
             dst ? "src" : "dst");
  if (bytes == 0) return Status::Ok();
  // Through host memory of the backend (the only host memory its primitives
  // accept), then the caller's.
  device::HostArray<char> bounce(*comm->dev, bytes);
  if (toDevice) {
    std::memcpy(bounce.data(), src, bytes);
    GC_CHECK(comm->dev->copy(dst, bounce.data(), bytes));
    return comm->dev->sync();
  }
  GC_CHECK(comm->dev->copy(bounce.data(), src, bytes));
  GC_CHECK(comm->dev->sync());
  std::memcpy(dst, bounce.data(), bytes);
  return Status::Ok();
}

}  // namespace
}  // namespace gradcomp::api

using gradcomp::Status;
using gradcomp::api::guard;

extern "C" {

gcResult_t gcCommInitFromEnv(gcComm_t* comm) {
  return guard("gcCommInitFromEnv", [&] { return gradcomp::api::initFromEnv(comm); });
}

gcResult_t gcGetUniqueId(const char* host, gcUniqueId* id) {
  return guard("gcGetUniqueId", [&] { return gradcomp::api::getUniqueId(host, id); });
}

gcResult_t gcCommInitRank(gcComm_t* comm, int nranks, const gcUniqueId* id, int rank) {
  return guard("gcCommInitRank", [&] { return gradcomp::api::initRank(comm, nranks, id, rank); });
}

int gcCommRank(gcComm_t comm) { return comm && comm->net ? comm->net->rank() : -1; }
int gcCommSize(gcComm_t comm) { return comm && comm->net ? comm->net->size() : -1; }

gcResult_t gcCommDestroy(gcComm_t comm) {
  return guard("gcCommDestroy", [&] { return gradcomp::api::destroy(comm); });
}

gcResult_t gcAlgoConfigCreate(const char* algo, gcAlgoConfig_t* config) {
  return guard("gcAlgoConfigCreate", [&] { return gradcomp::api::configCreate(algo, config); });
}

gcResult_t gcAlgoConfigSet(gcAlgoConfig_t config, const char* param, const char* value) {
  return guard("gcAlgoConfigSet", [&] { return gradcomp::api::configSet(config, param, value); });
}

void gcAlgoConfigDestroy(gcAlgoConfig_t config) { delete config; }

const char* gcAlgorithmNames(void) {
  // Registration finishes during static initialization, before any caller.
  static const std::string names = [] {
    std::string s;
    for (const auto* info : gradcomp::algo::listAlgorithms()) s += (s.empty() ? "" : ",") + info->name;
    return s;
  }();
  return names.c_str();
}

gcResult_t gcAllreduce(const void* sendbuf, void* recvbuf, size_t count, gcDataType_t dtype,
                       gcRedOp_t op, gcAlgoConfig_t config, uint64_t bufferKey, gcComm_t comm) {
  return guard("gcAllreduce", [&] {
    return gradcomp::api::collective(gradcomp::algo::Collective::AllReduce, sendbuf, recvbuf,
                                     count, int(dtype), int(op), config, bufferKey, comm);
  });
}

gcResult_t gcReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                           gcDataType_t dtype, gcRedOp_t op, gcAlgoConfig_t config,
                           uint64_t bufferKey, gcComm_t comm) {
  return guard("gcReduceScatter", [&]() -> gradcomp::Status {
    GC_REQUIRE(comm && comm->net, gradcomp::Err::InvalidArgument,
               "gcReduceScatter: comm is NULL or not initialized");
    const size_t P = size_t(comm->net->size());
    GC_REQUIRE(recvcount <= std::numeric_limits<size_t>::max() / P,
               gradcomp::Err::InvalidArgument,
               "gcReduceScatter: recvcount %zu x %zu ranks overflows", recvcount, P);
    return gradcomp::api::collective(gradcomp::algo::Collective::ReduceScatter, sendbuf, recvbuf,
                                     recvcount * P, int(dtype), int(op), config, bufferKey, comm);
  });
}

gcResult_t gcAllgather(const void* sendbuf, void* recvbuf, size_t sendcount,
                       gcDataType_t dtype, gcAlgoConfig_t config, gcComm_t comm) {
  return guard("gcAllgather", [&]() -> gradcomp::Status {
    GC_REQUIRE(comm && comm->net, gradcomp::Err::InvalidArgument,
               "gcAllgather: comm is NULL or not initialized");
    const size_t P = size_t(comm->net->size());
    GC_REQUIRE(sendcount <= std::numeric_limits<size_t>::max() / P,
               gradcomp::Err::InvalidArgument, "gcAllgather: sendcount %zu x %zu ranks overflows",
               sendcount, P);
    return gradcomp::api::collective(gradcomp::algo::Collective::AllGather, sendbuf, recvbuf,
                                     sendcount * P, int(dtype), gcSum, config, 0, comm);
  });
}

gcResult_t gcCommPolicyConfig(gcComm_t comm, size_t count, gcDataType_t dtype, gcRedOp_t op,
                              gcAlgoConfig_t* config, const char** why) {
  return guard("gcCommPolicyConfig", [&] {
    return gradcomp::api::policyConfig(comm, count, int(dtype), int(op), config, why);
  });
}

const char* gcCommLastAlgorithm(gcComm_t comm) { return comm ? comm->lastAlgorithm.c_str() : ""; }

gcResult_t gcCommGetTraffic(gcComm_t comm, gcTraffic_t* traffic) {
  return guard("gcCommGetTraffic", [&]() -> Status {
    GC_REQUIRE(comm && comm->net, gradcomp::Err::InvalidArgument, "gcCommGetTraffic: comm is NULL");
    GC_REQUIRE(traffic, gradcomp::Err::InvalidArgument, "gcCommGetTraffic: traffic is NULL");
    const gradcomp::transport::PeerCounters c = comm->net->totalCounters();
    *traffic = {c.bytesSent, c.bytesRecv, c.msgsSent, c.msgsRecv};
    return Status::Ok();
  });
}

gcResult_t gcCommGetTopology(gcComm_t comm, gcTopology_t* topology) {
  return guard("gcCommGetTopology", [&]() -> Status {
    GC_REQUIRE(comm && comm->net, gradcomp::Err::InvalidArgument, "gcCommGetTopology: comm is NULL");
    GC_REQUIRE(topology, gradcomp::Err::InvalidArgument, "gcCommGetTopology: topology is NULL");
    const auto& t = comm->topology;
    *topology = {t.hosts(), t.host, t.localRank, t.localSize, t.hierarchical ? 1 : 0};
    return Status::Ok();
  });
}

int gcCommRankHost(gcComm_t comm, int rank) {
  if (!comm || !comm->net || rank < 0 || rank >= int(comm->topology.hostOf.size())) return -1;
  return comm->topology.hostOf[size_t(rank)];
}

gcResult_t gcCommGetInterHostTraffic(gcComm_t comm, gcTraffic_t* traffic) {
  return guard("gcCommGetInterHostTraffic", [&]() -> Status {
    GC_REQUIRE(comm && comm->net, gradcomp::Err::InvalidArgument,
               "gcCommGetInterHostTraffic: comm is NULL");
    GC_REQUIRE(traffic, gradcomp::Err::InvalidArgument, "gcCommGetInterHostTraffic: traffic is NULL");
    const auto& hostOf = comm->topology.hostOf;
    *traffic = {0, 0, 0, 0};
    for (int p = 0; p < comm->net->size() && p < int(hostOf.size()); ++p) {
      if (hostOf[size_t(p)] == comm->topology.host) continue;
      const gradcomp::transport::PeerCounters c = comm->net->counters(p);
      traffic->bytesSent += c.bytesSent, traffic->bytesRecv += c.bytesRecv;
      traffic->msgsSent += c.msgsSent, traffic->msgsRecv += c.msgsRecv;
    }
    return Status::Ok();
  });
}

gcResult_t gcCommResetTraffic(gcComm_t comm) {
  return guard("gcCommResetTraffic", [&]() -> Status {
    GC_REQUIRE(comm && comm->net, gradcomp::Err::InvalidArgument, "gcCommResetTraffic: comm is NULL");
    comm->net->resetCounters();
    comm->dev->resetTraffic();
    return Status::Ok();
  });
}

gcResult_t gcCommGetDeviceTraffic(gcComm_t comm, gcDeviceTraffic_t* traffic) {
  return guard("gcCommGetDeviceTraffic", [&]() -> Status {
    GC_REQUIRE(comm && comm->dev, gradcomp::Err::InvalidArgument,
               "gcCommGetDeviceTraffic: comm is NULL");
    GC_REQUIRE(traffic, gradcomp::Err::InvalidArgument, "gcCommGetDeviceTraffic: traffic is NULL");
    const gradcomp::device::Traffic t = comm->dev->traffic();
    *traffic = {t.d2hBytes, t.h2dBytes, t.syncs, t.primitives};
    return Status::Ok();
  });
}

gcResult_t gcMemAlloc(gcComm_t comm, size_t bytes, void** ptr) {
  return guard("gcMemAlloc", [&]() -> Status {
    GC_REQUIRE(comm && comm->dev, gradcomp::Err::InvalidArgument, "gcMemAlloc: comm is NULL");
    GC_REQUIRE(ptr, gradcomp::Err::InvalidArgument, "gcMemAlloc: ptr is NULL");
    *ptr = comm->dev->allocate(bytes);
    GC_REQUIRE(*ptr, gradcomp::Err::SystemError, "gcMemAlloc: %zu bytes of %s memory: out of memory",
               bytes, comm->dev->name());
    return Status::Ok();
  });
}

gcResult_t gcMemFree(gcComm_t comm, void* ptr, size_t bytes) {
  return guard("gcMemFree", [&]() -> Status {
    GC_REQUIRE(comm && comm->dev, gradcomp::Err::InvalidArgument, "gcMemFree: comm is NULL");
    if (ptr) comm->dev->deallocate(ptr, bytes);
    return comm->dev->sync();
  });
}

gcResult_t gcMemcpyToDevice(gcComm_t comm, void* dst, const void* src, size_t bytes) {
  return guard("gcMemcpyToDevice", [&] {
    return gradcomp::api::memCopy(comm, dst, src, bytes, true, "gcMemcpyToDevice");
  });
}

gcResult_t gcMemcpyToHost(gcComm_t comm, void* dst, const void* src, size_t bytes) {
  return guard("gcMemcpyToHost", [&] {
    return gradcomp::api::memCopy(comm, dst, src, bytes, false, "gcMemcpyToHost");
  });
}

}  // extern "C"
