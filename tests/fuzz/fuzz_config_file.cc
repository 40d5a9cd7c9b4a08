// The admin's TOML file (plugin/nccl/config_file.h): any text either parses
// into a ConfigFile or fails with a Status; it never throws or crashes.
// Input: the file's text.
#include "plugin/nccl/config_file.h"
#include "tests/fuzz/fuzz_common.h"

using namespace gradcomp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  nccl::ConfigFile cfg;
  Status s = nccl::parseConfigText(text, "fuzz.toml", &cfg);
  if (!s.ok()) FUZZ_CHECK(!s.message().empty());
  for (const nccl::FileRule& r : cfg.rules) FUZZ_CHECK(!r.origin.empty());
  return 0;
}
