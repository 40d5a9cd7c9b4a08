#include "transport/ucx_context.h"

#include <poll.h>
#include <ucs/debug/log_def.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/param.h"
#include "transport/placement.h"
#include "transport/ucx_cuda_env.h"

namespace gradcomp::transport::ucx {
namespace {

// Sleep bound on the event fd: short enough that a missed wake-up costs little,
// long enough that sleeping ranks leave the cores to the ones with work.
constexpr int kSleepMs = 2;

struct ProcessContext {
  std::mutex mu;
  ucp_context_h context[2] = {nullptr, nullptr};
  pid_t pid[2] = {-1, -1};
};

ProcessContext& processContext() {
  static ProcessContext pc;
  return pc;
}

const char* kindName(ContextKind kind) {
  return kind == ContextKind::Transport ? "transport" : "bootstrap";
}

std::atomic<bool> gQuietUcx{false};

ucs_log_func_rc_t ucxLogHandler(const char* file, unsigned line, const char* /*function*/,
                                ucs_log_level_t level, const ucs_log_component_config_t* /*comp*/,
                                const char* format, va_list ap) {
  if (!gQuietUcx.load(std::memory_order_relaxed) || level > UCS_LOG_LEVEL_WARN ||
      level == UCS_LOG_LEVEL_FATAL)
    return UCS_LOG_FUNC_RC_CONTINUE;  // UCX's own handler prints it
  char text[512];
  vsnprintf(text, sizeof text, format, ap);
  GC_INFO(TRANSPORT, "UCX %s after a peer failure: %s (%s:%u)",
          level <= UCS_LOG_LEVEL_ERROR ? "error" : "warning", text, file, line);
  return UCS_LOG_FUNC_RC_STOP;
}

void installLogHandler() {
  static std::once_flag once;
  std::call_once(once, [] { ucs_log_push_handler(ucxLogHandler); });
}

}  // namespace

void quietLogsAfterFailure() {
  installLogHandler();
  gQuietUcx.store(true, std::memory_order_relaxed);
}

std::string statusText(ucs_status_t s) {
  return std::string(ucs_status_string(s)) + " (" + std::to_string(static_cast<int>(s)) + ")";
}

Status context(ContextKind kind, ucp_context_h* out) {
  ProcessContext& pc = processContext();
  const int k = static_cast<int>(kind);
  std::lock_guard<std::mutex> lock(pc.mu);
  if (pc.context[k] && pc.pid[k] == getpid()) {
    *out = pc.context[k];
    return Status::Ok();
  }
  // A context inherited from the parent across fork() is abandoned, not
  // cleaned up: its resources belong to the parent.
  if (kind == ContextKind::Bootstrap) {
    // The bootstrap listener is re-created on the same port by every new
    // communicator; without SO_REUSEADDR the bind fails while connections of
    // the previous one sit in TIME_WAIT. UCX 1.13 takes this setting only
    // from the environment (ucp_config_modify rejects it), and a user's own
    // value wins (overwrite = 0).
    setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
  }
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  GC_REQUIRE(st == UCS_OK, Err::SystemError,
             "ucp_config_read failed: %s (check the UCX_* variables)", statusText(st).c_str());
  std::vector<std::pair<const char*, const char*>> overrides;
  if (kind == ContextKind::Bootstrap) {
    overrides = {{"TLS", "tcp"}, {"NET_DEVICES", "all"}};
  } else if (!getenv("UCX_KEEPALIVE_INTERVAL")) {
    // UCX's endpoint keepalive (every 20 s by default, PEER endpoints) is
    // worker progress like any message, so a transport wait blocked on a
    // stopped peer never saw GRADCOMP_TIMEOUT_S of silence once it was 20 s
    // or more: the stop went unnoticed. Dead peers are found by the failure
    // monitor instead (failure_monitor.h). A user's own value wins.
    overrides = {{"KEEPALIVE_INTERVAL", "inf"}};
  }
  // GRADCOMP_PLACEMENT=auto: the RDMA NIC nearest this rank (placement.h),
  // unless the user chose devices. Only the transport's context: the
  // bootstrap's stays on TCP over every device.
  std::string netDevices;
  if (kind == ContextKind::Transport && !getenv("UCX_NET_DEVICES")) {
    std::string mode = "auto";
    (void)param::getString(param::Id::PLACEMENT, &mode);  // validated with the registry
    if (mode == "auto" && rdmaDevicesPresent()) {
      const Placement where = discoverPlacementNear(placementDevice());
      netDevices = ucxNetDevicesFor(where);
      if (!netDevices.empty()) {
        overrides.push_back({"NET_DEVICES", netDevices.c_str()});
        GC_INFO(INIT, "UCX network device %s, nearest this rank (%s); set UCX_NET_DEVICES or "
                "GRADCOMP_PLACEMENT=off to choose otherwise", netDevices.c_str(),
                describePlacement(where).c_str());
      }
    }
  }
  // A UCX with CUDA modules: gradcomp's safe defaults (ucx_cuda_env.h).
  if (Status cuda = applyUcxCudaDefaults(config, kindName(kind)); !cuda.ok()) {
    ucp_config_release(config);
    return cuda;
  }
  for (auto& kv : overrides) {
    st = ucp_config_modify(config, kv.first, kv.second);
    if (st != UCS_OK) {
      ucp_config_release(config);
      return makeStatus(Err::SystemError, "%s: cannot set UCX %s=%s: %s", kindName(kind), kv.first,
                        kv.second, statusText(st).c_str());
    }
  }
  installLogHandler();
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;  // transports and bootstraps may live on different threads
  ucp_context_h ctx = nullptr;
  st = ucp_init(&params, config, &ctx);
  ucp_config_release(config);
  GC_REQUIRE(st == UCS_OK, Err::SystemError,
             "ucp_init failed: %s (check UCX_TLS / UCX_NET_DEVICES)", statusText(st).c_str());
  pc.context[k] = ctx;
  pc.pid[k] = getpid();
  GC_INFO(TRANSPORT, "UCX %s context created (UCX %s)", kindName(kind), ucp_get_version_string());
  *out = ctx;
  return Status::Ok();
}

Worker::~Worker() { destroy(); }

void Worker::destroy() {
  if (worker_) ucp_worker_destroy(worker_);
  worker_ = nullptr;
  efd_ = -1;
}

Status Worker::create(ContextKind kind, const char* what, int64_t clientId) {
  ucp_context_h ctx = nullptr;
  GC_CHECK(context(kind, &ctx));
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;  // one thread at a time per owner
  if (clientId >= 0) {
    params.field_mask |= UCP_WORKER_PARAM_FIELD_CLIENT_ID;
    params.client_id = static_cast<uint64_t>(clientId);
  }
  ucs_status_t st = ucp_worker_create(ctx, &params, &worker_);
  GC_REQUIRE(st == UCS_OK, Err::SystemError, "%s: ucp_worker_create failed: %s", what,
             statusText(st).c_str());
  st = ucp_worker_get_efd(worker_, &efd_);
  if (st != UCS_OK) {
    destroy();
    return makeStatus(Err::SystemError, "%s: ucp_worker_get_efd failed: %s", what,
                      statusText(st).c_str());
  }
  return Status::Ok();
}

Status Worker::address(std::string* out, bool netOnly) const {
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
  attr.address_flags = netOnly ? UCP_WORKER_ADDRESS_FLAG_NET_ONLY : 0;
  ucs_status_t st = ucp_worker_query(worker_, &attr);
  GC_REQUIRE(st == UCS_OK, Err::SystemError, "ucp_worker_query (%s address) failed: %s",
             netOnly ? "network-only" : "worker", statusText(st).c_str());
  out->assign(reinterpret_cast<const char*>(attr.address), attr.address_length);
  ucp_worker_release_address(worker_, attr.address);
  return Status::Ok();
}

Waiter::Waiter(const Worker& worker, int spinUs)
    : worker_(worker.worker_), efd_(worker.efd_),
      spin_(std::chrono::microseconds(spinUs > 0 ? spinUs : 0)), last_(Clock::now()) {}

bool Waiter::progress() {
  if (ucp_worker_progress(worker_) == 0) return false;
  last_ = Clock::now();
  return true;
}

void Waiter::noteProgress() { last_ = Clock::now(); }

void Waiter::idle() {
  if (Clock::now() - last_ < spin_) return;
  // UCS_ERR_BUSY: events arrived since the last progress; go progress them.
  if (ucp_worker_arm(worker_) != UCS_OK) return;
  pollfd pfd{efd_, POLLIN, 0};
  int rc = poll(&pfd, 1, kSleepMs);
  if (rc < 0 && errno != EINTR) GC_TRACE(TRANSPORT, "poll on the UCX event fd: %s", strerror(errno));
}

double Waiter::sinceProgress() const {
  return std::chrono::duration<double>(Clock::now() - last_).count();
}

std::string hostIdentity() {
  std::string id;
  if (FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {0};
    if (fgets(buf, sizeof(buf), f)) id = buf;
    fclose(f);
  }
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  char ns[128] = {0};
  const ssize_t n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
  if (n > 0) id += std::string("/") + std::string(ns, static_cast<size_t>(n));
  char host[256] = {0};
  if (id.empty() && gethostname(host, sizeof(host) - 1) == 0) id = host;
  return id;
}

}  // namespace gradcomp::transport::ucx
