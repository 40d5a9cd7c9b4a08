// The GRADCOMP_* parameter registry (common/param.h): parsing and rejection
// per Kind, freezing at first read, unknown-name detection, Overrides.
//
// The registry freezes once per process, so every test that reads the
// environment runs its body in a forked child (runRanks(1, ...)) whose
// environment is set before the first read. REQUIRE failures in a child make
// it exit non-zero, which the parent's allSucceeded() reports.
#include <algorithm>
#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "common/param.h"
#include "support/multiproc.h"

namespace param = gradcomp::param;
using gradcomp::Err;
using gradcomp::Status;

namespace {

const param::Spec& specOf(const char* name) {
  const param::Spec* s = param::find(name);
  REQUIRE(s != nullptr);
  return *s;
}

// Parses `text` for the named variable with the variable as the origin.
Status parseAs(const char* name, const std::string& text, param::Value* v) {
  return param::parse(specOf(name), text, std::string("GRADCOMP_") + name, v);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Runs `body` in a fresh process with `env` set before its first read.
void inFreshProcess(const std::map<std::string, std::string>& env,
                    const std::function<void()>& body) {
  auto exits = gradcomp::test::runRanks(
      1,
      [&](int) {
        body();
        return 0;
      },
      env, 30.0);
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

}  // namespace

TEST_CASE("Int parameters parse in range and reject the rest", "[params]") {
  param::Value v;
  REQUIRE(parseAs("WAIT_SPIN_US", "0", &v).ok());
  CHECK(v.i == 0);
  REQUIRE(parseAs("WAIT_SPIN_US", "1000000", &v).ok());
  CHECK(v.i == 1000000);
  for (const char* badText : {"-1", "1000001", "12x", "", "1.5", "99999999999999999999"}) {
    INFO("text '" << badText << "'");
    Status s = parseAs("WAIT_SPIN_US", badText, &v);
    REQUIRE_FALSE(s.ok());
    CHECK(s.code() == Err::InvalidConfig);
    CHECK(contains(s.message(), "GRADCOMP_WAIT_SPIN_US"));
    CHECK(contains(s.message(), "0..1000000"));
  }
}

TEST_CASE("Double parameters parse finite numbers in range", "[params]") {
  param::Value v;
  REQUIRE(parseAs("TIMEOUT_S", "1.5", &v).ok());
  CHECK(v.d == 1.5);
  REQUIRE(parseAs("TIMEOUT_S", "1e3", &v).ok());
  CHECK(v.d == 1000.0);
  REQUIRE(parseAs("TIMEOUT_S", "0.05", &v).ok());
  for (const char* badText : {"0.01", "86401", "nan", "inf", "abc", "", "5s"}) {
    INFO("text '" << badText << "'");
    Status s = parseAs("TIMEOUT_S", badText, &v);
    REQUIRE_FALSE(s.ok());
    CHECK(contains(s.message(), "GRADCOMP_TIMEOUT_S"));
    CHECK(contains(s.message(), "0.05..86400"));
  }
}

TEST_CASE("Size parameters take K/M/G suffixes, check ranges and overflow", "[params]") {
  param::Value v;
  REQUIRE(parseAs("DENSE_RD_MAX_BYTES", "64K", &v).ok());
  CHECK(v.i == 65536);
  REQUIRE(parseAs("DENSE_RD_MAX_BYTES", "64KB", &v).ok());
  CHECK(v.i == 65536);
  REQUIRE(parseAs("DENSE_RD_MAX_BYTES", "3m", &v).ok());
  CHECK(v.i == 3 << 20);
  REQUIRE(parseAs("DENSE_RD_MAX_BYTES", "1G", &v).ok());
  CHECK(v.i == int64_t(1) << 30);
  REQUIRE(parseAs("DENSE_RD_MAX_BYTES", "4097", &v).ok());
  CHECK(v.i == 4097);
  for (const char* badText : {"2G", "1025M", "12Q", "-1", "", "K", "1.5M", "64KiB"}) {
    INFO("text '" << badText << "'");
    Status s = parseAs("DENSE_RD_MAX_BYTES", badText, &v);
    REQUIRE_FALSE(s.ok());
    CHECK(contains(s.message(), "GRADCOMP_DENSE_RD_MAX_BYTES"));
    CHECK(contains(s.message(), "0..1G"));
  }

  uint64_t bytes = 0;
  REQUIRE(param::parseSize("18446744073709551615", "-e", &bytes).ok());
  CHECK(bytes == UINT64_MAX);
  REQUIRE(param::parseSize("16777215T", "-e", &bytes).ok());
  CHECK(bytes == (uint64_t(16777215) << 40));
  for (const char* overflow : {"18446744073709551616", "16777216T", "17179869184G"}) {
    INFO("text '" << overflow << "'");
    Status s = param::parseSize(overflow, "-e", &bytes);
    REQUIRE_FALSE(s.ok());
    CHECK(contains(s.message(), "-e"));
  }
}

TEST_CASE("Bool parameters accept the documented spellings in any case", "[params]") {
  param::Value v;
  for (const char* yes : {"1", "on", "ON", "true", "True", "yes", "YES"}) {
    INFO("text '" << yes << "'");
    REQUIRE(parseAs("STRICT", yes, &v).ok());
    CHECK(v.i == 1);
  }
  for (const char* no : {"0", "off", "Off", "false", "FALSE", "no", "No"}) {
    INFO("text '" << no << "'");
    REQUIRE(parseAs("STRICT", no, &v).ok());
    CHECK(v.i == 0);
  }
  for (const char* badText : {"2", "maybe", "", "y", "10"}) {
    INFO("text '" << badText << "'");
    Status s = parseAs("STRICT", badText, &v);
    REQUIRE_FALSE(s.ok());
    CHECK(contains(s.message(), "GRADCOMP_STRICT"));
    CHECK(contains(s.message(), "on, off"));
  }
}

TEST_CASE("Enum parameters match case-insensitively and return the canonical name",
          "[params]") {
  param::Value v;
  REQUIRE(parseAs("DEBUG", "info", &v).ok());
  CHECK(v.s == "INFO");
  REQUIRE(parseAs("DEBUG", "Trace", &v).ok());
  CHECK(v.s == "TRACE");
  for (const char* badText : {"verbose", "", "INFOX", "WARN|INFO"}) {
    INFO("text '" << badText << "'");
    Status s = parseAs("DEBUG", badText, &v);
    REQUIRE_FALSE(s.ok());
    CHECK(contains(s.message(), "GRADCOMP_DEBUG"));
    CHECK(contains(s.message(), "NONE|WARN|INFO|TRACE"));
  }
}

TEST_CASE("Every registered default parses with its own spec", "[params]") {
  for (const param::Spec* s : param::all()) {
    if (!s->defaultText[0]) continue;
    INFO("GRADCOMP_" << s->name << " default '" << s->defaultText << "'");
    param::Value v;
    CHECK(param::parse(*s, s->defaultText, s->name, &v).ok());
  }
}

TEST_CASE("Values are frozen at first read", "[params][mp]") {
  inFreshProcess({{"GRADCOMP_TIMEOUT_S", "5"}}, [] {
    double t = 0;
    REQUIRE(param::getDouble(param::Id::TIMEOUT_S, &t).ok());
    REQUIRE(t == 5.0);
    setenv("GRADCOMP_TIMEOUT_S", "7", 1);
    REQUIRE(param::getDouble(param::Id::TIMEOUT_S, &t).ok());
    REQUIRE(t == 5.0);
    // A variable first read after the change sees the new environment.
    setenv("GRADCOMP_WAIT_SPIN_US", "3", 1);
    int64_t spin = 0;
    REQUIRE(param::getInt(param::Id::WAIT_SPIN_US, &spin).ok());
    REQUIRE(spin == 3);
  });
}

TEST_CASE("A bad environment value is an error on every read, never the default",
          "[params][mp]") {
  inFreshProcess({{"GRADCOMP_TIMEOUT_S", "abc"}}, [] {
    double t = -1;
    for (int read = 0; read < 2; ++read) {
      Status s = param::getDouble(param::Id::TIMEOUT_S, &t);
      REQUIRE_FALSE(s.ok());
      REQUIRE(s.code() == Err::InvalidConfig);
      REQUIRE(contains(s.message(), "GRADCOMP_TIMEOUT_S='abc'"));
      REQUIRE(contains(s.message(), "0.05..86400"));
    }
    REQUIRE(t == -1);
    Status all = param::validateEnvironment();
    REQUIRE_FALSE(all.ok());
    REQUIRE(contains(all.message(), "GRADCOMP_TIMEOUT_S"));
  });
}

TEST_CASE("Unset parameters without a default report absence", "[params][mp]") {
  inFreshProcess({{"GRADCOMP_NRANKS", "4"}}, [] {
    unsetenv("GRADCOMP_RANK");
    param::Value v;
    REQUIRE(param::get(param::Id::RANK, &v).ok());
    REQUIRE_FALSE(v.set);
    REQUIRE_FALSE(param::isSet(param::Id::RANK));
    REQUIRE(param::isSet(param::Id::NRANKS));
    // A default counts as set.
    REQUIRE(param::isSet(param::Id::TIMEOUT_S));
  });
}

TEST_CASE("Unknown GRADCOMP_ names are reported, known ones are not", "[params][mp]") {
  inFreshProcess({{"GRADCOMP_NOT_A_PARAM", "1"}, {"GRADCOMP_TIMEOUT_S", "9"}}, [] {
    auto names = param::unknownEnvironmentNames();
    REQUIRE(std::count(names.begin(), names.end(), "GRADCOMP_NOT_A_PARAM") == 1);
    REQUIRE(std::count(names.begin(), names.end(), "GRADCOMP_TIMEOUT_S") == 0);
    REQUIRE(std::count(names.begin(), names.end(), "GRADCOMP_RANK") == 0);
    // Unknown names do not make the known ones invalid.
    REQUIRE(param::validateEnvironment().ok());
    unsetenv("GRADCOMP_NOT_A_PARAM");
    names = param::unknownEnvironmentNames();
    REQUIRE(std::count(names.begin(), names.end(), "GRADCOMP_NOT_A_PARAM") == 0);
  });
}

TEST_CASE("Overrides take precedence over the environment and validate alike",
          "[params][mp]") {
  inFreshProcess({{"GRADCOMP_TIMEOUT_S", "5"}, {"GRADCOMP_WAIT_SPIN_US", "11"}}, [] {
    param::Overrides o;
    REQUIRE(o.set("TIMEOUT_S", "7", "--timeout").ok());
    double t = 0;
    REQUIRE(o.getDouble(param::Id::TIMEOUT_S, &t).ok());
    REQUIRE(t == 7.0);
    REQUIRE(param::getDouble(param::Id::TIMEOUT_S, &t).ok());
    REQUIRE(t == 5.0);  // the registry itself is untouched
    int64_t spin = 0;
    REQUIRE(o.getInt(param::Id::WAIT_SPIN_US, &spin).ok());
    REQUIRE(spin == 11);  // not overridden: the environment

    Status bad = o.set("TIMEOUT_S", "abc", "--timeout");
    REQUIRE_FALSE(bad.ok());
    REQUIRE(contains(bad.message(), "--timeout"));
    REQUIRE(contains(bad.message(), "0.05..86400"));
    REQUIRE(o.getDouble(param::Id::TIMEOUT_S, &t).ok());
    REQUIRE(t == 7.0);  // a rejected value leaves the previous one

    Status unknown = o.set("NOPE", "1", "--param");
    REQUIRE_FALSE(unknown.ok());
    REQUIRE(contains(unknown.message(), "NOPE"));
    REQUIRE(contains(unknown.message(), "--param"));

    bool strict = true;
    REQUIRE(o.set("STRICT", "off", "--strict").ok());
    REQUIRE(o.getBool(param::Id::STRICT, &strict).ok());
    REQUIRE_FALSE(strict);
  });
}

TEST_CASE("The markdown documents every variable", "[params]") {
  const std::string md = param::markdownDoc();
  for (const param::Spec* s : param::all()) {
    INFO("GRADCOMP_" << s->name);
    CHECK(contains(md, std::string("`GRADCOMP_") + s->name + "`"));
  }
  CHECK(contains(md, "0.05..86400"));
}
