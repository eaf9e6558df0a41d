// SPDX-License-Identifier: Apache-2.0
// Real programs run as ordinary users on a volume (the brief's lesson: test
// as users are): an SQLite session and git scripts.
#ifndef SROUTE_TESTS_UTIL_REAL_PROGRAMS_H_
#define SROUTE_TESTS_UTIL_REAL_PROGRAMS_H_

#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "tests/util/run_as.h"

namespace sroute::testing {

// The first column of the first row `sql` returns, or "<error>".
inline std::string SqliteValue(sqlite3* db, const char* sql) {
  sqlite3_stmt* st = nullptr;
  std::string out = "<error>";
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    const auto* t = sqlite3_column_text(st, 0);
    out = t != nullptr ? reinterpret_cast<const char*>(t) : "";
  }
  sqlite3_finalize(st);
  return out;
}

// An SQLite session as `user` on `path` (journal `mode`): a table of rows
// and their count, then transactions of two rows each while go_on(rows
// committed) says so (two minutes at most); "ok" if every transaction
// committed and the database checks whole with every row, else what went
// wrong. It runs on a thread of the user's (RunAsThread), not in a forked
// child: tests run it beside threads of their own.
inline std::string SqliteSessionAs(const User& user, const std::string& path,
                                   const std::string& mode,
                                   const std::function<bool(int)>& go_on) {
  return RunAsThread(user, [&]() -> std::string {
    sqlite3* db = nullptr;
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return "open failed";
    auto exec = [&](const std::string& sql) -> std::string {
      char* err = nullptr;
      if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) == SQLITE_OK) {
        return "";
      }
      std::string e = sql + ": " + (err != nullptr ? err : "?");
      sqlite3_free(err);
      return e;
    };
    std::string e = exec("PRAGMA journal_mode=" + mode +
                         "; CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);"
                         "CREATE TABLE total(n INTEGER);"
                         "INSERT INTO total VALUES (0);");
    int committed = 0;
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (e.empty() && go_on(committed) &&
           std::chrono::steady_clock::now() < until) {
      e = exec(
          "BEGIN; INSERT INTO t(v) VALUES (randomblob(3000)), "
          "(randomblob(500)); UPDATE total SET n = n + 2; COMMIT;");
      if (e.empty()) committed += 2;
    }
    auto value = [&](const char* sql) { return SqliteValue(db, sql); };
    if (e.empty()) {
      const std::string check = value("PRAGMA integrity_check");
      const std::string rows = value("SELECT count(*) FROM t");
      const std::string total = value("SELECT n FROM total");
      if (check != "ok") {
        e = "integrity_check: " + check;
      } else if (rows != std::to_string(committed) || total != rows) {
        e = "rows " + rows + ", total " + total + ", committed " +
            std::to_string(committed);
      }
    }
    sqlite3_close(db);
    return e.empty() ? "ok" : e;
  });
}

// The database a SqliteSessionAs left at `path`, opened again as `user`:
// "ok N" (N rows) if it checks whole and its count matches its rows.
inline std::string SqliteCheckAs(const User& user, const std::string& path) {
  return RunAs(user, [&]() -> std::string {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) !=
        SQLITE_OK) {
      sqlite3_close(db);
      return "open failed";
    }
    auto value = [&](const char* sql) { return SqliteValue(db, sql); };
    const std::string check = value("PRAGMA integrity_check");
    const std::string rows = value("SELECT count(*) FROM t");
    const std::string total = value("SELECT n FROM total");
    sqlite3_close(db);
    if (check != "ok") return "integrity_check: " + check;
    if (rows != total) return "rows " + rows + ", total " + total;
    return "ok " + rows;
  });
}

// `script` run by `user` in `dir` (its HOME) with git's identity set: its
// output, or "exit N: output" if it failed.
inline std::string GitAs(const User& user, const std::string& dir,
                         const std::string& script) {
  const std::string cmd =
      "cd '" + dir + "' && export HOME='" + dir +
      "' GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=u "
      "GIT_AUTHOR_EMAIL=u@x GIT_COMMITTER_NAME=u GIT_COMMITTER_EMAIL=u@x "
      "&& (" +
      script + ")";
  auto [rc, out] = RunCommandAs(user, cmd);
  return rc == 0 ? out : "exit " + std::to_string(rc) + ": " + out;
}

inline bool GitOk(const std::string& out) {
  return out.rfind("exit ", 0) != 0 && out.find("<child failed") == out.npos;
}

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_REAL_PROGRAMS_H_
