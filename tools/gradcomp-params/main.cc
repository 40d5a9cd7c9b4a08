// gradcomp-params: the GRADCOMP_* parameter registry from the command line.
//   --markdown  docs/configuration.md (generated; a test fails when it is stale)
//   --list      one line per variable: name, type, default
//   --check     validate every GRADCOMP_* variable in the environment, and what
//               the NCCL interposer would load from them (GRADCOMP_ALGO, _COMMS,
//               _MIN_BYTES and the GRADCOMP_CONFIG file: parsed, keys and
//               algorithms checked); prints the first error (exit 1) and names
//               unknown variables (exit 1)
#include <cstdio>
#include <cstring>
#include <string>

#include "common/param.h"
#include "plugin/nccl/policy.h"

namespace {

namespace param = gradcomp::param;

const char* kindName(param::Kind k) {
  switch (k) {
    case param::Kind::Int: return "integer";
    case param::Kind::Double: return "number";
    case param::Kind::Size: return "size";
    case param::Kind::Bool: return "boolean";
    case param::Kind::Enum: return "enum";
    case param::Kind::String: return "string";
  }
  return "?";
}

int list() {
  for (const param::Spec* s : param::all()) {
    const std::string name = std::string("GRADCOMP_") + s->name;
    printf("%-30s %-8s %s%s%s\n", name.c_str(), kindName(s->kind),
           s->defaultText[0] ? s->defaultText : "(unset)", s->constraint[0] ? "  " : "",
           s->constraint);
  }
  return 0;
}

int check() {
  int rc = 0;
  // Unknown names first: validateEnvironment() only sees known ones.
  for (const std::string& name : param::unknownEnvironmentNames()) {
    fprintf(stderr, "gradcomp-params: %s is not a known gradcomp parameter\n", name.c_str());
    rc = 1;
  }
  gradcomp::Status s;
  {
    param::QuietScope quiet;  // the unknown names were reported above
    s = param::validateEnvironment();
  }
  if (!s.ok()) {
    fprintf(stderr, "gradcomp-params: %s\n", s.message().c_str());
    return 1;
  }
  // What the interposer loads at its first communicator, config file included.
  gradcomp::nccl::Policy policy;
  s = gradcomp::nccl::loadPolicy(&policy);
  if (!s.ok()) {
    fprintf(stderr, "gradcomp-params: %s\n", s.message().c_str());
    return 1;
  }
  if (rc != 0) return rc;
  if (policy.configPath.empty())
    printf("gradcomp-params: environment OK\n");
  else
    printf("gradcomp-params: environment OK; GRADCOMP_CONFIG=%s parsed (%zu rule%s)\n",
           policy.configPath.c_str(), policy.rules.size(), policy.rules.size() == 1 ? "" : "s");
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc == 2 ? argv[1] : "";
  if (strcmp(mode, "--markdown") == 0) {
    fputs(param::markdownDoc().c_str(), stdout);
    return 0;
  }
  if (strcmp(mode, "--list") == 0) return list();
  if (strcmp(mode, "--check") == 0) return check();
  fprintf(argc == 2 && strcmp(mode, "--help") == 0 ? stdout : stderr,
          "usage: gradcomp-params --markdown | --list | --check\n"
          "  --markdown  print docs/configuration.md\n"
          "  --list      print every GRADCOMP_* variable with its type and default\n"
          "  --check     validate the GRADCOMP_* variables of this environment and the\n"
          "              GRADCOMP_CONFIG file they name\n");
  return argc == 2 && strcmp(mode, "--help") == 0 ? 0 : 2;
}
