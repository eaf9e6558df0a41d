#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# docs/reference/config.md documents exactly the fields of
# proto/config.proto: every field of every message has a row in a field
# table of the page, and every row names a field the proto has.
#
# The proto: each top-level message is a section of the page ("## ..." with
# the message's name in backticks); a field of a message nested in it is
# named FIELD.SUBFIELD after the field that holds it (HostConfig's
# `endpoint.name`), or TYPE.SUBFIELD if no field of the enclosing message
# holds it. Oneof members are fields of their message; enum values, options,
# reserved and comments are not fields.
# The page: the rows of tables whose header starts "| field |"; the first
# cell of a row is the field's name in backticks.
#
# usage: config_reference_test.sh SOURCE_DIR
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 SOURCE_DIR" >&2; exit 2; }
src=$1
proto=$src/proto/config.proto
page=$src/docs/reference/config.md
for f in "$proto" "$page"; do
  [ -f "$f" ] || { echo "config_reference: no $f"; exit 1; }
done

# The proto's fields, one "MESSAGE FIELD" a line.
from_proto() {
  awk '
    # Comments go first: /* ... */ (across lines too), then // to the end.
    {
      line = $0
      out = ""
      while (line != "") {
        if (incomment) {
          i = index(line, "*/")
          if (i == 0) { line = ""; break }
          line = substr(line, i + 2)
          incomment = 0
          continue
        }
        a = index(line, "/*"); b = index(line, "//")
        if (b > 0 && (a == 0 || b < a)) { out = out substr(line, 1, b - 1); line = "" }
        else if (a > 0) { out = out substr(line, 1, a - 1); line = substr(line, a + 2); incomment = 1 }
        else { out = out line; line = "" }
      }
      text = text " " out
    }
    END {
      # Statements end at "{", "}" or ";". (Strings in the proto hold none
      # of them: config.proto has no default values or string options.)
      gsub(/\t/, " ", text)
      depth = 0
      n = length(text)
      stmt = ""
      for (p = 1; p <= n; p++) {
        c = substr(text, p, 1)
        if (c != "{" && c != "}" && c != ";") { stmt = stmt c; continue }
        gsub(/^ +| +$/, "", stmt)
        gsub(/ +/, " ", stmt)
        if (c == "{") {
          split(stmt, w, " ")
          depth++
          kind[depth] = w[1]
          if (w[1] == "message") {
            # Full name: the enclosing message, a dot, this one.
            parent[depth] = msg_at(depth - 1)
            name[depth] = (parent[depth] == "" ? "" : parent[depth] ".") w[2]
            messages[++nmessages] = name[depth]
          } else {
            name[depth] = ""
          }
        } else if (c == "}") {
          if (depth > 0) depth--
        } else if (stmt != "") {
          field(stmt)
        }
        stmt = ""
      }
      resolve()
    }
    # The message a statement at `d` belongs to ("" at the top level),
    # looking through oneofs; "-" inside an enum, service or other block.
    function msg_at(d) {
      while (d > 0 && kind[d] == "oneof") d--
      if (d == 0) return ""
      return kind[d] == "message" ? name[d] : "-"
    }
    function field(stmt,   m, w, k, type, fname) {
      m = msg_at(depth)
      if (m == "" || m == "-") return
      if (stmt ~ /^(option|reserved|extensions|extend) /) return
      # [label] TYPE NAME = NUMBER [options]; map<K, V> has a space inside.
      gsub(/map< */, "map<", stmt); gsub(/ *, */, ",", stmt); gsub(/ *>/, ">", stmt)
      k = split(stmt, w, " ")
      if (w[1] == "optional" || w[1] == "repeated" || w[1] == "required") {
        type = w[2]; fname = w[3]
      } else {
        type = w[1]; fname = w[2]
      }
      if (fname == "" || fname !~ /^[A-Za-z_][A-Za-z0-9_]*$/) {
        print "config_reference: cannot read the field statement \"" stmt "\" of " m > "/dev/stderr"
        bad = 1
        exit 1
      }
      nf++
      fmsg[nf] = m; fname_[nf] = fname; ftype[nf] = type
    }
    # The page name of message `full` (HostConfig.Endpoint): its section
    # (the top-level message) and the prefix its fields take ("endpoint.").
    function place(full,   parts, k, top, prefix, i, enclosing, short, holder) {
      k = split(full, parts, ".")
      top = parts[1]
      prefix = ""
      enclosing = top
      for (i = 2; i <= k; i++) {
        short = parts[i]
        holder = holder_of(enclosing, short)
        prefix = prefix (holder == "" ? short : holder) "."
        enclosing = enclosing "." short
      }
      section_of = top
      return prefix
    }
    # A field of message `m` whose type is its nested message `short`.
    function holder_of(m, short,   j) {
      for (j = 1; j <= nf; j++) {
        if (fmsg[j] == m && (ftype[j] == short || ftype[j] == m "." short)) return fname_[j]
      }
      return ""
    }
    function resolve(   j, prefix) {
      if (bad) exit 1
      for (j = 1; j <= nf; j++) {
        prefix = place(fmsg[j])
        print section_of " " prefix fname_[j]
      }
    }
  ' "$proto"
}

# The page's rows, one "MESSAGE FIELD" a line.
from_page() {
  awk '
    /^## / {
      section = ""
      if (match($0, /`[A-Za-z_][A-Za-z0-9_]*`/)) section = substr($0, RSTART + 1, RLENGTH - 2)
      intable = 0
      next
    }
    /^\| *field *\|/ {
      if (section == "") {
        print "config_reference: " FILENAME ":" NR ": a field table outside a message section" > "/dev/stderr"
        bad = 1
      }
      intable = 1
      next
    }
    intable && /^\|/ {
      if ($0 ~ /^\|[ :|-]+$/) next  # the separator row
      if (match($0, /^\| *`[^`]+`/)) {
        cell = substr($0, RSTART, RLENGTH)
        sub(/^\| *`/, "", cell); sub(/`$/, "", cell)
        print section " " cell
      } else {
        print "config_reference: " FILENAME ":" NR ": a row without a `field` in its first cell" > "/dev/stderr"
        bad = 1
      }
      next
    }
    { intable = 0 }
    END { exit bad }
  ' "$page"
}

proto_fields=$(from_proto) || exit 1
page_fields=$(from_page) || exit 1
[ -n "$proto_fields" ] || { echo "config_reference: no field found in $proto"; exit 1; }

indent() { while IFS= read -r line; do echo "  $line"; done; }

bad=0
dups=$(sort <<<"$page_fields" | uniq -d)
if [ -n "$dups" ]; then
  echo "config_reference: documented twice in $page:"
  indent <<<"$dups"
  bad=1
fi
missing=$(comm -23 <(sort -u <<<"$proto_fields") <(sort -u <<<"$page_fields"))
extra=$(comm -13 <(sort -u <<<"$proto_fields") <(sort -u <<<"$page_fields"))
if [ -n "$missing" ]; then
  echo "config_reference: in $proto but not documented in $page (MESSAGE FIELD):"
  indent <<<"$missing"
  bad=1
fi
if [ -n "$extra" ]; then
  echo "config_reference: documented in $page but not in $proto (MESSAGE FIELD):"
  indent <<<"$extra"
  bad=1
fi
[ "$bad" -eq 0 ] || exit 1
echo "config_reference: $(wc -l <<<"$proto_fields") fields of" \
  "$(cut -d' ' -f1 <<<"$proto_fields" | sort -u | wc -l) messages documented"
