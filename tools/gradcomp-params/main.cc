// gradcomp-params: the GRADCOMP_* parameter registry from the command line.
//   --markdown  docs/configuration.md (generated; a test fails when it is stale)
//   --list      one line per variable: name, type, default
//   --check     validate every GRADCOMP_* variable in the environment and the
//               NCCL interposer's policy (algorithm names, GRADCOMP_COMMS, the
//               config file: GRADCOMP_CONFIG or /etc/gradcomp.conf); prints the
//               first error (exit 1) and names unknown variables (exit 1)
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
  // What the interposer would do with this environment (it loads the same policy).
  gradcomp::nccl::Policy policy;
  s = gradcomp::nccl::loadPolicy(&policy);
  if (!s.ok()) {
    fprintf(stderr, "gradcomp-params: %s\n", s.message().c_str());
    return 1;
  }
  if (rc != 0) return rc;
  printf("gradcomp-params: environment OK\n");
  std::string config = "none";
  if (!policy.configPath.empty())
    config = policy.configPath + (policy.configIsSystemDefault ? " (default admin file)" : " (GRADCOMP_CONFIG)");
  printf("gradcomp-params: NCCL interposer: algorithm %s, communicators '%s', min bytes %llu, "
         "%zu rule(s), config file %s\n",
         policy.algo.c_str(), policy.commsText.c_str(), (unsigned long long)policy.minBytes,
         policy.rules.size(), config.c_str());
  return 0;
}

void usage(FILE* out) {
  fputs(
      "NAME\n"
      "  gradcomp-params - the GRADCOMP_* parameters: list, check, document\n"
      "\n"
      "SYNOPSIS\n"
      "  gradcomp-params --list | --check | --markdown | --help\n"
      "\n"
      "DESCRIPTION\n"
      "  Every gradcomp setting is a GRADCOMP_* environment variable from one registry.\n"
      "\n"
      "OPTIONS\n"
      "  --list      every GRADCOMP_* variable with its type, default and accepted values\n"
      "  --check     validate this environment as libgradcomp.so would: each GRADCOMP_*\n"
      "              value, unknown GRADCOMP_* names, and the NCCL interposer's policy\n"
      "              (GRADCOMP_ALGO, GRADCOMP_COMMS, the config file: GRADCOMP_CONFIG, else\n"
      "              /etc/gradcomp.conf when it exists); prints the resulting policy\n"
      "  --markdown  print docs/configuration.md (the same registry as a table)\n"
      "  --help      this help\n"
      "\n"
      "EXIT STATUS\n"
      "  0 valid; 1 a bad value, an unknown GRADCOMP_* name or a bad config file (the\n"
      "  message names it); 2 a usage error.\n"
      "\n"
      "SEE ALSO\n"
      "  gradcomp-launch(1); docs/configuration.md and docs/usage.md in\n"
      "  /usr/share/doc/gradcomp (or <prefix>/share/doc/gradcomp)\n",
      out);
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
  if (strcmp(mode, "--help") == 0 || strcmp(mode, "-h") == 0) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "gradcomp-params: %s (see gradcomp-params --help)\n",
          argc == 1 ? "missing the mode: --list, --check or --markdown"
                    : ("unknown arguments starting at '" + std::string(argv[1]) + "'").c_str());
  return 2;
}
