#include "algorithms/call_check.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <new>
#include <thread>

#include "common/log.h"
#include "algorithms/shared/requests.h"
#include "common/param.h"
#include "transport/failure_monitor.h"

namespace gradcomp::algo {
namespace {

// Wire layout (host byte order, like the monitor's: one build, one kind of host):
//   u32 magic | u16 version | u16 collective (0 allreduce, 1 reduce-scatter) | u64 callSeq |
//   u64 count | i32 dtype | i32 op | u64 paramsHash | char algorithm[24] (NUL-padded) |
//   the parameters' text (the rest of the message, not NUL-terminated)
constexpr uint32_t kMagic = 0x47435347;  // "GCSG"
constexpr uint16_t kVersion = 2;
constexpr size_t kAlgoBytes = 24;
constexpr double kExplainS = 0.2;  // how long a failed call waits for signatures to explain it
// Signatures of wait-avoiding calls still awaited, at most: beyond, the
// oldest is waited for (bounded like any wait) before the next call posts.
constexpr size_t kMaxLate = 1024;

uint64_t fnv(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

bool checkEnabled() {
  static const bool on = [] {
    bool v = true;
    (void)param::getBool(param::Id::CALL_CHECK, &v);
    return v;
  }();
  return on;
}

const char* dtypeText(int t) {
  switch (DataType(t)) {
    case DataType::Int32: case DataType::Int64: case DataType::Float16: case DataType::Float32:
    case DataType::Float64: case DataType::BFloat16: return dtypeName(DataType(t));
  }
  return nullptr;
}

std::string opText(int op) {
  return op == int32_t(RedOp::Sum)   ? "sum"
         : op == int32_t(RedOp::Avg) ? "avg"
                                     : "op " + std::to_string(op);
}

std::string hex(uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "%#llx", (unsigned long long)v);
  return b;
}

// A parameter's effective value as text: "0.01" and "1e-2" read alike.
std::string valueText(const param::Spec& spec, const param::Value& v) {
  if (!v.set) return "(unset)";
  char b[64];
  switch (spec.kind) {
    case param::Kind::Double: snprintf(b, sizeof b, "%.10g", v.d); return b;
    case param::Kind::Enum:
    case param::Kind::String: return v.s;
    default: snprintf(b, sizeof b, "%lld", (long long)v.i); return b;
  }
}

struct Decoded {
  bool ok = false;
  CallSignature sig;
  std::map<std::string, std::string> params;  // "GRADCOMP_DENSITY" -> "0.01"
  int dtype = 0, op = 0, coll = 0;
};

std::map<std::string, std::string> splitParams(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(at, end - at);
    const size_t eq = item.find('=');
    if (eq != std::string::npos) out[item.substr(0, eq)] = item.substr(eq + 1);
    at = end + 1;
  }
  return out;
}

Decoded decode(const unsigned char* wire, size_t bytes) {
  Decoded d;
  uint32_t magic = 0;
  uint16_t version = 0, coll = 0;
  if (bytes < kSignatureBytes) return d;
  memcpy(&magic, wire, 4);
  memcpy(&version, wire + 4, 2);
  if (magic != kMagic || version != kVersion || wire[63] != 0) return d;
  int32_t dtype = 0, op = 0;
  memcpy(&coll, wire + 6, 2);
  memcpy(&d.sig.callSeq, wire + 8, 8);
  memcpy(&d.sig.count, wire + 16, 8);
  memcpy(&dtype, wire + 24, 4);
  memcpy(&op, wire + 28, 4);
  memcpy(&d.sig.paramsHash, wire + 32, 8);
  d.sig.algorithm = reinterpret_cast<const char*>(wire + 40);
  d.sig.params.assign(reinterpret_cast<const char*>(wire + kSignatureBytes),
                      bytes - kSignatureBytes);
  d.params = splitParams(d.sig.params);
  d.dtype = dtype, d.op = op, d.coll = coll;
  d.ok = true;
  return d;
}

std::string collText(int coll) {
  return coll == 0 ? "allreduce" : coll == 1 ? "reducescatter" : coll == 2 ? "allgather"
                                                                            : "collective ?";
}

// "0-1,3": sorted ranks as ranges.
std::string rankList(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return (ranks.size() == 1 ? "rank " : "ranks ") + out;
}

// The fields of a signature, by name, as text.
std::vector<std::pair<std::string, std::string>> fieldsOf(const Decoded& d) {
  std::vector<std::pair<std::string, std::string>> f = {
      {"collective", collText(d.coll)},
      {"call", "#" + std::to_string(d.sig.callSeq)},
      {"count", std::to_string(d.sig.count)},
      {"dtype", dtypeText(d.dtype) ? dtypeText(d.dtype) : "dtype " + std::to_string(d.dtype)},
      {"op", opText(d.op)},
      {"algorithm", d.sig.algorithm}};
  for (const auto& [k, v] : d.params) f.emplace_back(k, v);
  return f;
}

Decoded decodeMine(const CallSignature& sig) {
  unsigned char wire[kSignatureMaxBytes];
  const size_t n = encodeSignature(sig, wire);
  return decode(wire, n);
}

}  // namespace

CallSignature callSignature(const AlgorithmInfo& info, const param::Overrides& config,
                            uint64_t callSeq, const AllreduceArgs& args) {
  CallSignature sig;
  sig.callSeq = callSeq;
  sig.count = args.count;
  sig.dtype = args.dtype;
  sig.op = args.op;
  sig.coll = args.coll;
  sig.algorithm = info.name;
  // Effective values, not their spelling: "0.01" and "1e-2" hash alike.
  uint64_t h = 0xcbf29ce484222325ull;
  for (param::Id id : info.params) {
    param::Value v;
    if (!config.get(id, &v).ok()) continue;
    const param::Spec& spec = param::spec(id);
    h = fnv(h, spec.name, strlen(spec.name) + 1);
    h = fnv(h, &v.set, sizeof v.set);
    if (spec.kind == param::Kind::Double) h = fnv(h, &v.d, sizeof v.d);
    else if (spec.kind == param::Kind::Enum || spec.kind == param::Kind::String)
      h = fnv(h, v.s.data(), v.s.size() + 1);
    else h = fnv(h, &v.i, sizeof v.i);
    sig.params += (sig.params.empty() ? "GRADCOMP_" : " GRADCOMP_") + std::string(spec.name) +
                  "=" + valueText(spec, v);
  }
  sig.paramsHash = h;
  return sig;
}

size_t encodeSignature(const CallSignature& sig, unsigned char out[kSignatureMaxBytes]) {
  memset(out, 0, kSignatureBytes);
  const int32_t dtype = int32_t(sig.dtype), op = int32_t(sig.op);
  memcpy(out, &kMagic, 4);
  memcpy(out + 4, &kVersion, 2);
  const uint16_t coll = uint16_t(sig.coll);
  memcpy(out + 6, &coll, 2);
  memcpy(out + 8, &sig.callSeq, 8);
  memcpy(out + 16, &sig.count, 8);
  memcpy(out + 24, &dtype, 4);
  memcpy(out + 28, &op, 4);
  memcpy(out + 32, &sig.paramsHash, 8);
  memcpy(out + 40, sig.algorithm.data(), std::min(sig.algorithm.size(), kAlgoBytes - 1));
  // Cut at a whole "NAME=value" item when the text does not fit.
  std::string text = sig.params;
  while (text.size() > kSignatureMaxBytes - kSignatureBytes) {
    const size_t cut = text.rfind(' ');
    text.resize(cut == std::string::npos ? 0 : cut);
  }
  memcpy(out + kSignatureBytes, text.data(), text.size());
  return kSignatureBytes + text.size();
}

Status compareSignature(const CallSignature& mine, int myRank, const unsigned char* wire,
                        size_t bytes, int peer) {
  const Decoded d = decode(wire, bytes);
  if (!d.ok) {
    uint32_t magic = 0;
    uint16_t version = 0;
    if (bytes >= 6) memcpy(&magic, wire, 4), memcpy(&version, wire + 4, 2);
    return makeStatus(Err::RemoteError,
                      "call signature from rank %d is malformed: %zu bytes, magic %#x version %u "
                      "(expected %zu to %zu bytes, magic %#x version %u)",
                      peer, bytes, magic, unsigned(version), kSignatureBytes, kSignatureMaxBytes,
                      kMagic, unsigned(kVersion));
  }
  const CallSignature& theirs = d.sig;
  std::string mineAlgo = mine.algorithm.substr(0, kAlgoBytes - 1);
  const bool kind = d.coll != int(mine.coll);
  const bool seq = kind || theirs.callSeq != mine.callSeq, count = theirs.count != mine.count,
             dt = d.dtype != int32_t(mine.dtype), rop = d.op != int32_t(mine.op),
             algo = theirs.algorithm != mineAlgo,
             params = !algo && theirs.paramsHash != mine.paramsHash;
  if (!seq && !count && !dt && !rop && !algo && !params) return Status::Ok();

  // The parameters that differ, by name and value (the hash when the text
  // does not tell: cut, or an older peer).
  std::string theirParams, myParams;
  if (params) {
    const auto own = splitParams(mine.params);
    for (const auto& [k, v] : own) {
      auto it = d.params.find(k);
      const std::string other = it == d.params.end() ? "(not sent)" : it->second;
      if (other == v) continue;
      theirParams += " " + k + "=" + other;
      myParams += (myParams.empty() ? "" : " ") + k + "=" + v;
    }
    if (myParams.empty()) {
      theirParams = " parameters " + hex(theirs.paramsHash);
      myParams = "parameters " + hex(mine.paramsHash);
    }
  }
  const char* dtName = dtypeText(d.dtype);
  const std::string theirDtype = dtName ? dtName : "dtype " + std::to_string(d.dtype);
  std::string text = "rank " + std::to_string(peer) + " called " + collText(d.coll) + " #" +
                     std::to_string(theirs.callSeq) + " with count " +
                     std::to_string(theirs.count) + " " + theirDtype +
                     (d.coll == int(Collective::AllGather) ? "" : " " + opText(d.op));
  if (algo || params) text += " algorithm " + theirs.algorithm;
  if (params) text += theirParams;
  std::string own;
  auto add = [&](const std::string& part) { own += (own.empty() ? "" : " ") + part; };
  if (count) add("count " + std::to_string(mine.count));
  if (dt) add(dtypeName(mine.dtype));
  if (rop) add(redOpName(mine.op));
  if (algo) add("algorithm " + mineAlgo);
  if (params) add(myParams);
  text += ", rank " + std::to_string(myRank) +
          (seq ? " called " + std::string(collectiveName(mine.coll)) + " #" +
                     std::to_string(mine.callSeq) + (own.empty() ? "" : " with ")
               : " with ") +
          own;
  if (params)
    text += " (the algorithm's parameters differ: set GRADCOMP_* and gcAlgoConfigSet alike on "
            "every rank)";
  return Status(Err::RemoteError, text);
}

std::string describeDisagreement(
    const CallSignature& mine, int myRank,
    const std::vector<std::pair<int, std::vector<unsigned char>>>& theirs) {
  std::vector<std::pair<int, Decoded>> all = {{myRank, decodeMine(mine)}};
  for (const auto& [peer, wire] : theirs) {
    Decoded d = decode(wire.data(), wire.size());
    if (d.ok) all.emplace_back(peer, std::move(d));
  }
  // field -> value -> ranks, fields in the order of this rank's signature.
  std::vector<std::string> order;
  std::map<std::string, std::map<std::string, std::vector<int>>> byField;
  for (const auto& [rank, d] : all)
    for (const auto& [field, value] : fieldsOf(d)) {
      if (!byField.count(field)) order.push_back(field);
      byField[field][value].push_back(rank);
    }
  std::string out;
  for (const std::string& field : order) {
    const auto& values = byField[field];
    size_t ranks = 0;
    for (const auto& [v, r] : values) ranks += r.size();
    // A parameter one side does not have is named only when the algorithm agrees.
    if (values.size() < 2 && ranks == all.size()) continue;
    std::string part = field + ":";
    bool first = true;
    for (const auto& [v, r] : values) {
      part += (first ? " " : ", ") + v + " on " + rankList(r);
      first = false;
    }
    if (ranks < all.size()) continue;  // a parameter of another algorithm
    out += (out.empty() ? "" : "; ") + part;
  }
  return out;
}

// ---- CallChecker -------------------------------------------------------------

namespace {

// One signature message: a receive from `peer` or a send to it, its slot in
// the call's request set (shared/requests.h), and the buffer the transport
// reads or writes until it completes.
struct Message {
  int peer = -1;
  bool recv = true;
  size_t slot = 0;
  std::unique_ptr<SignatureWire> buf = std::make_unique<SignatureWire>();
  size_t got = 0;
  bool arrived = false;
};

// A message of an earlier wait-avoiding call, handed over from its call's
// set (RequestSet::release) with what it is compared against.
struct LateMessage {
  int peer = -1;
  bool recv = true;
  transport::Handle handle = 0;  // 0: completed or released
  std::unique_ptr<SignatureWire> buf;
  size_t got = 0;
  std::shared_ptr<const CallSignature> mine;  // of the call it belongs to
};

}  // namespace

// Handles kept past their call (wait-avoiding algorithms): cancelled, whatever
// the exit path, by clear() or the destructor.
struct CallChecker::Posted {
  transport::Transport* net = nullptr;
  std::deque<LateMessage> messages;
  ~Posted() { clear(); }
  void clear() {
    for (LateMessage& m : messages)
      if (m.handle && net) net->cancel(m.handle);
    messages.clear();
  }
};

namespace {

// Tests a receive of the call once: arrived, or still pending (false; a
// receive the transport released on an error counts as lost).
bool poll(shared::RequestSet& set, Message& m) {
  if (m.arrived || !set.pending(m.slot)) return m.arrived;
  bool done = false;
  if (set.test(m.slot, &done).ok() && done) m.arrived = true, m.got = set.bytes(m.slot);
  return m.arrived;
}

// The watch of the transport's waits during the call: compares each of the
// call's signatures as it arrives.
class SignatureWatch final : public transport::WaitWatch {
 public:
  SignatureWatch(shared::RequestSet& set, std::vector<Message>& recvs, const CallSignature& mine,
                 int me)
      : set_(set), recvs_(recvs), mine_(mine), me_(me) {}
  Status check() override {
    if (left_ == 0) return Status::Ok();
    left_ = 0;
    for (Message& m : recvs_) {
      if (m.arrived || !set_.pending(m.slot)) continue;
      if (!poll(set_, m)) {
        left_ += set_.pending(m.slot);
        continue;
      }
      tripped_ = compareSignature(mine_, me_, m.buf->data(), m.got, m.peer);
      if (!tripped_.ok()) return tripped_;
    }
    return Status::Ok();
  }
  // What ended a wait (Ok: nothing).
  const Status& tripped() const { return tripped_; }

 private:
  shared::RequestSet& set_;
  std::vector<Message>& recvs_;
  const CallSignature& mine_;
  int me_;
  size_t left_ = SIZE_MAX;
  Status tripped_;
};

// Sets the watch for one scope (also when an exception leaves it).
class WatchScope {
 public:
  WatchScope(transport::Transport& net, transport::WaitWatch* w) : net_(net) {
    net_.setWaitWatch(w);
  }
  ~WatchScope() { net_.setWaitWatch(nullptr); }

 private:
  transport::Transport& net_;
};

Status runGuarded(Algorithm& alg, Context& ctx, const AllreduceArgs& args) {
  try {
    return runCollective(alg, ctx, args);
  } catch (const device::BackendRefused& refused) {
    return refused.status();
  } catch (const std::bad_alloc&) {
    return makeStatus(Err::SystemError,
                      "%s: out of memory (an allocation failed; with GRADCOMP_PROXY_CHECK=error a "
                      "draw beyond the call's reservation is refused)",
                      collectiveName(args.coll));
  } catch (const std::exception& e) {
    return makeStatus(Err::Internal, "%s: unexpected exception: %s", collectiveName(args.coll),
                      e.what());
  } catch (...) {
    return makeStatus(Err::Internal, "%s: unexpected exception", collectiveName(args.coll));
  }
}

}  // namespace

CallChecker::CallChecker() : late_(std::make_unique<Posted>()) {}
CallChecker::~CallChecker() = default;

void CallChecker::release() { late_->clear(); }

Status CallChecker::pollLate(transport::Transport& net, int me) {
  auto& late = late_->messages;
  Status s;
  for (LateMessage& m : late) {
    if (!m.recv || m.handle == 0 || !s.ok()) continue;
    bool done = false;
    if (!net.test(m.handle, &done, &m.got).ok()) m.handle = 0;  // released: lost
    else if (done) m.handle = 0, s = compareSignature(*m.mine, me, m.buf->data(), m.got, m.peer);
  }
  while (late.size() > kMaxLate && s.ok()) {  // bounded: wait for the oldest
    LateMessage& m = late.front();
    if (m.handle) {
      const transport::Handle h = m.handle;
      m.handle = 0;
      s = net.wait(h, &m.got);
      if (s.ok() && m.recv) s = compareSignature(*m.mine, me, m.buf->data(), m.got, m.peer);
    }
    late.pop_front();
  }
  late.erase(std::remove_if(late.begin(), late.end(),
                            [](const LateMessage& m) { return m.handle == 0; }),
             late.end());
  return s;
}

Status CallChecker::run(Algorithm& alg, Context& ctx, const AllreduceArgs& args,
                        const CallSignature& sig) {
  transport::Transport& net = ctx.net;
  const int P = net.size(), me = net.rank();
  const std::shared_ptr<transport::FailureMonitor> monitor = net.failureMonitor();
  const bool check = P > 1 && checkEnabled();
  if (late_->net != &net) late_->clear(), late_->net = &net;

  // Signatures of earlier wait-avoiding calls that arrived since.
  Status s = pollLate(net, me);

  // Receives before sends; to every peer, or around the ring beyond kSignatureAllToAllMax.
  shared::RequestSet set(net, "call signature");
  std::vector<Message> recvs, sends;
  if (check && s.ok()) {
    std::vector<int> from, to;
    if (P <= kSignatureAllToAllMax) {
      for (int p = 0; p < P; ++p)
        if (p != me) from.push_back(p), to.push_back(p);
    } else {
      from = {(me + P - 1) % P};
      to = {(me + 1) % P};
    }
    recvs.resize(from.size());
    sends.resize(to.size());
    for (size_t i = 0; s.ok() && i < from.size(); ++i) {
      Message& m = recvs[i];
      m.peer = from[i];
      s = set.irecvUpTo(m.peer, transport::kSignatureTag, m.buf->data(), kSignatureMaxBytes,
                        nullptr, &m.slot);
    }
    for (size_t i = 0; s.ok() && i < to.size(); ++i) {
      Message& m = sends[i];
      m.peer = to[i], m.recv = false;
      const size_t n = encodeSignature(sig, m.buf->data());
      s = set.isend(m.peer, transport::kSignatureTag, m.buf->data(), n, &m.slot);
    }
  }
  SignatureWatch watch(set, recvs, sig, me);
  if (s.ok()) {
    WatchScope scope(net, check ? &watch : nullptr);
    s = runGuarded(alg, ctx, args);
  }
  // Failed after a verdict: nothing to explain (s is the verdict, or a
  // symptom found at the same time; the verdict wins below).
  const bool agreed = !s.ok() && monitor && monitor->failed();

  if (s.ok() && alg.waitsForEveryRank(ctx, args)) {
    // Every peer entered the call before this rank could finish it: no real wait.
    s = set.waitAll();
    for (Message& m : recvs)
      if (s.ok() && !m.arrived) m.arrived = true, m.got = set.bytes(m.slot);
  } else if (s.ok()) {
    // A wait-avoiding call: what has not arrived is compared at later calls.
    for (Message& m : recvs) (void)poll(set, m);
    for (Message& m : sends) {
      bool done = false;
      if (set.pending(m.slot)) (void)set.test(m.slot, &done);
    }
  } else if (!agreed) {
    // Explain the failure with what the peers said they were doing.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kExplainS);
    auto pending = [&] {
      return std::count_if(recvs.begin(), recvs.end(),
                           [&](const Message& m) { return !m.arrived && set.pending(m.slot); });
    };
    while (pending() > 0 && std::chrono::steady_clock::now() < deadline &&
           !(monitor && monitor->failed())) {
      for (Message& m : recvs) (void)poll(set, m);
      if (pending() > 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  if (!agreed) {
    std::vector<std::pair<int, std::vector<unsigned char>>> heard;
    for (const Message& m : recvs)
      if (m.arrived)
        heard.emplace_back(m.peer, std::vector<unsigned char>(m.buf->begin(),
                                                              m.buf->begin() + m.got));
    for (const Message& m : recvs) {
      if (!m.arrived) continue;
      Status c = compareSignature(sig, me, m.buf->data(), m.got, m.peer);
      if (c.ok()) continue;
      const std::string all = describeDisagreement(sig, me, heard);
      // A symptom of the disagreement itself (the watch's) says nothing more.
      const bool symptomIsCheck = !watch.tripped().ok() && s.message() == watch.tripped().message();
      const std::string symptom = s.ok() || symptomIsCheck
                                      ? ""
                                      : " (this rank's own error: " + s.toString() + ")";
      s = Status(Err::RemoteError,
                 c.message() + (all.empty() ? "" : "; the ranks heard from: " + all) + symptom);
      GC_INFO(ALGO, "%s", s.message().c_str());
      break;
    }
  }
  if (s.ok()) {
    // Wait-avoiding: what is still in flight is kept for later calls; the
    // set cancels the rest when it goes (failures).
    const auto mine = std::make_shared<const CallSignature>(sig);
    for (std::vector<Message>* list : {&recvs, &sends})
      for (Message& m : *list)
        if (set.pending(m.slot))
          late_->messages.push_back(
              LateMessage{m.peer, m.recv, set.release(m.slot), std::move(m.buf), 0, mine});
  }
  // A verdict wins: over this rank's own error when both came at once, and
  // over a part of the call that completed here (a peer failed it). s is
  // kept when it is the verdict with what this rank was doing.
  if (monitor && monitor->failed()) {
    const Status v = monitor->verdict();
    return !s.ok() && s.message().rfind(v.message(), 0) == 0 ? s : v;
  }
  if (s.ok() || !monitor) return s;
  return monitor->agreeOnOwnFailure(s);
}

}  // namespace gradcomp::algo
