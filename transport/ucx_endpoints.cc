#include "transport/ucx_endpoints.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>

#include <chrono>

#include "common/log.h"
#include "transport/ucx_context.h"

namespace gradcomp::transport::ucx {

Endpoints::~Endpoints() { close(true, 0.5); }

namespace {

// Unique transport names of an endpoint's lanes, from ucp_ep_print_info
// (UCX 1.13 has no query for them): lane lines read "lane[0]: 8:posix/memory.0 ...".
std::string laneTransports(ucp_ep_h ep) {
  char* text = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (!f) return "";
  ucp_ep_print_info(ep, f);
  fclose(f);
  std::vector<std::string> names;
  for (const char* p = text; p && (p = strstr(p, "lane[")) != nullptr;) {
    p = strchr(p, ']');
    if (!p) break;
    const char* colon = strchr(p, ':');  // "]: "
    const char* tl = colon ? strchr(colon + 1, ':') : nullptr;  // "8:posix/"
    const char* slash = tl ? strchr(tl, '/') : nullptr;
    const char* eol = strchr(p, '\n');
    if (!slash || (eol && slash > eol)) continue;
    std::string name(tl + 1, size_t(slash - tl - 1));
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  free(text);
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

}  // namespace

void Endpoints::onError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  Slot* slot = static_cast<Slot*>(arg);
  if (slot->closing || slot->failed != UCS_OK) return;
  slot->failed = status;
  GC_INFO(TRANSPORT, "endpoint to peer %d failed: %s", slot->peer, statusText(status).c_str());
}

Status Endpoints::create(int peer, const std::string& address, ErrMode mode,
                         ucs_status_t* ucsStatus) {
  Slot* slot = slots_[peer].get();
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = mode == ErrMode::Peer ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  params.err_handler.cb = &Endpoints::onError;
  params.err_handler.arg = slot;
  *ucsStatus = ucp_ep_create(worker_, &params, &slot->ep);
  if (*ucsStatus != UCS_OK) {
    slot->ep = nullptr;
    return makeStatus(Err::SystemError,
                      "cannot create a UCX endpoint to peer %d: %s (check UCX_TLS; error mode %s)",
                      peer, statusText(*ucsStatus).c_str(), mode == ErrMode::Peer ? "PEER" : "NONE");
  }
  return Status::Ok();
}

Status Endpoints::connect(ucp_worker_h worker, int self, const std::vector<std::string>& addresses,
                          const std::vector<std::string>& netAddresses,
                          const std::vector<bool>& sameHost, const std::string& modeName,
                          bool netBetweenHosts) {
  worker_ = worker;
  self_ = self;
  selfAddress_ = addresses[size_t(self)];
  for (size_t p = 0; p < addresses.size(); ++p) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->peer = static_cast<int>(p);
  }
  int peerModeCount = 0, netOnlyCount = 0;
  std::vector<int> unreachableOverNet;
  for (int p = 0; p < static_cast<int>(addresses.size()); ++p) {
    if (p == self) continue;
    const bool netOnly = netBetweenHosts && !sameHost[p];
    ErrMode mode = modeName == "NONE" || (modeName == "AUTO" && sameHost[p]) ? ErrMode::None
                                                                              : ErrMode::Peer;
    const std::string* address = netOnly ? &netAddresses[p] : &addresses[p];
    ucs_status_t st = UCS_OK;
    Status s = create(p, *address, mode, &st);
    if (!s.ok() && modeName == "AUTO" && mode == ErrMode::Peer) {
      GC_INFO(TRANSPORT,
              "no transport in UCX_TLS detects failure of peer %d (%s); its endpoint uses error "
              "mode NONE and a dead peer is detected by GRADCOMP_TIMEOUT_S",
              p, statusText(st).c_str());
      mode = ErrMode::None;
      s = create(p, *address, mode, &st);
    }
    if (!s.ok() && netOnly) {  // no network transport: whatever UCX offers
      unreachableOverNet.push_back(p);
      address = &addresses[p];
      s = create(p, *address, mode, &st);
      if (!s.ok() && modeName == "AUTO" && mode == ErrMode::Peer) {
        mode = ErrMode::None;
        s = create(p, *address, mode, &st);
      }
    }
    GC_CHECK(s);
    slots_[p]->mode = mode;
    peerModeCount += mode == ErrMode::Peer;
    netOnlyCount += address == &netAddresses[p];
  }
  if (!unreachableOverNet.empty())
    GC_INFO(TRANSPORT,
            "rank %d: no network transport in UCX_TLS reaches %zu peer(s) on other hosts (first: "
            "%d); their endpoints use every transport UCX offers, shared memory included",
            self, unreachableOverNet.size(), unreachableOverNet[0]);
  GC_INFO(TRANSPORT, "rank %d: %zu endpoints, %d with error mode PEER, the rest NONE; %d over the "
          "network only (other hosts)", self, addresses.size() - 1, peerModeCount, netOnlyCount);
  return Status::Ok();
}

std::string Endpoints::route(int peer) const {
  if (peer < 0 || size_t(peer) >= slots_.size() || peer == self_ || !slots_[peer]->ep) return "";
  return laneTransports(slots_[peer]->ep);
}

Status Endpoints::get(int peer, ucp_ep_h* out) {
  Slot* slot = slots_[peer].get();
  if (!slot->ep && peer == self_) {
    // Loopback never fails on its own, and UCX's self transport cannot do PEER.
    ucs_status_t st = UCS_OK;
    GC_CHECK(create(peer, selfAddress_, ErrMode::None, &st));
    slot->mode = ErrMode::None;
  }
  GC_REQUIRE(slot->ep, Err::Internal, "no endpoint to peer %d", peer);
  *out = slot->ep;
  return Status::Ok();
}

void Endpoints::close(bool force, double boundS) {
  std::vector<void*> pending;
  for (auto& slot : slots_) {
    if (!slot->ep) continue;
    slot->closing = true;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = force || slot->failed != UCS_OK ? UCP_EP_CLOSE_FLAG_FORCE : 0;  // 0: FLUSH
    ucs_status_ptr_t req = ucp_ep_close_nbx(slot->ep, &param);
    slot->ep = nullptr;
    if (req && !UCS_PTR_IS_ERR(req)) pending.push_back(req);
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(boundS));
  while (!pending.empty()) {
    if (ucp_worker_progress(worker_) == 0) {
      if (Clock::now() >= deadline) break;
      timespec ts{0, 200 * 1000};  // a closing peer needs CPU more than we do
      nanosleep(&ts, nullptr);
    }
    for (size_t i = 0; i < pending.size();) {
      if (ucp_request_check_status(pending[i]) != UCS_INPROGRESS) {
        ucp_request_free(pending[i]);
        pending[i] = pending.back();
        pending.pop_back();
      } else {
        ++i;
      }
    }
  }
  if (!pending.empty())
    GC_INFO(TRANSPORT, "%zu endpoint closes still pending after %.1f s; abandoned", pending.size(),
            boundS);
  for (void* req : pending) ucp_request_free(req);  // UCX frees it when the close ends
}

}  // namespace gradcomp::transport::ucx
