#include "transport/ucx_request.h"

#include "transport/transport.h"

namespace gradcomp::transport::ucx {
namespace {

void onSendDone(void* /*request*/, ucs_status_t status, void* user) {
  Op* op = static_cast<Op*>(user);
  op->status = status;
  op->length = op->bytes;
  op->done = true;
}

void onRecvDone(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* info,
                void* user) {
  Op* op = static_cast<Op*>(user);
  op->status = status;
  op->length = info && status == UCS_OK ? info->length : 0;
  op->done = true;
}

// Settles what ucp_*_nbx returned: NULL (done now), an error, or a request.
void settle(ucs_status_ptr_t ret, Op* op, size_t immediateLength) {
  if (ret == nullptr) {
    op->done = true;
    op->length = immediateLength;
  } else if (UCS_PTR_IS_ERR(ret)) {
    op->done = true;
    op->status = UCS_PTR_STATUS(ret);
  } else {
    op->request = ret;
  }
}

}  // namespace

uint64_t wireTag(int srcRank, uint64_t tag) {
  return (static_cast<uint64_t>(srcRank) << kTagBits) | (tag & kTagMask);
}

void postSend(ucp_ep_h ep, uint64_t tag, const void* buf, Op* op) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  param.cb.send = onSendDone;
  param.user_data = op;
  param.memory_type = UCS_MEMORY_TYPE_HOST;  // host buffers only: skip detection
  settle(ucp_tag_send_nbx(ep, buf, op->bytes, tag, &param), op, op->bytes);
}

namespace {
ucp_request_param_t recvParam(Op* op) {
  ucp_request_param_t param{};
  // Receives always complete through the callback: UCX 1.13 does not
  // reliably report the length of an immediately completed receive.
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = onRecvDone;
  param.user_data = op;
  param.memory_type = UCS_MEMORY_TYPE_HOST;
  return param;
}
}  // namespace

void postRecv(ucp_worker_h worker, uint64_t tag, uint64_t mask, void* buf, Op* op) {
  ucp_request_param_t param = recvParam(op);
  settle(ucp_tag_recv_nbx(worker, buf, op->bytes, tag, mask, &param), op, 0);
}

void postRecvProbed(ucp_worker_h worker, ucp_tag_message_h msg, void* buf, Op* op) {
  ucp_request_param_t param = recvParam(op);
  settle(ucp_tag_msg_recv_nbx(worker, buf, op->bytes, msg, &param), op, 0);
}

void freeRequest(Op* op) {
  if (op->request) ucp_request_free(op->request);
  op->request = nullptr;
}

void cancelRequest(ucp_worker_h worker, Op* op) {
  if (op->request && !op->done) ucp_request_cancel(worker, op->request);
}

}  // namespace gradcomp::transport::ucx
