#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# docs/reference/metrics.md and the code agree: every metric family a daemon
# can export is on the page with its type, and every family the page lists
# is one the code declares. It fails naming the difference both ways.
# usage: metrics_reference_test.sh SOURCE_DIR
#
# The families come from the source, not from scraping live daemons: every
# family is declared with a string literal (Exposition::Declare, or the
# counter/gauge helpers around it in host/host_metrics.cc and fuse/run_volume.cc),
# so the source names them all, whereas a scrape needs a FUSE mount, a
# storage server and a controller (and a host with --controller) to show
# them all. The script reads every C++ file outside tests/ and build
# directories that uses MetricType, without comments, and fails if a
# "sroute_..." literal there is not a Declare or helper argument it
# understands, or a Declare takes a name that is not a literal: a computed
# name cannot slip past. The page's families are the first cells of its
# table rows (| `sroute_...` | TYPE | ...).
set -euo pipefail
export LC_ALL=C  # one collation for sort, comm and join
src=${1:?usage: metrics_reference_test.sh SOURCE_DIR}
page=$src/docs/reference/metrics.md
[ -f "$page" ] || { echo "no page $page"; exit 1; }

mapfile -t files < <(find "$src" -mindepth 1 \
    \( -name 'build*' -o -name tests -o -name '.*' \) -prune -o \
    -type f \( -name '*.cc' -o -name '*.h' \) \
    -exec grep -l 'MetricType::' {} + | sort)
if [ "${#files[@]}" = 0 ]; then
  echo "no file declares metrics under $src"
  exit 1
fi

# "NAME TYPE" per family the code declares; "?? ..." lines for what the
# script cannot read.
from_code=$(perl -0777 -ne '
  # Comments out, string literals kept.
  s{("(?:\\.|[^"\\\n])*")|//[^\n]*|/\*.*?\*/}{defined $1 ? $1 : ""}gse;
  my %known;
  while (/\bDeclare\(\s*"(sroute_[A-Za-z0-9_:]*)"\s*,
           \s*MetricType::k(Counter|Gauge|Histogram)\b/gx) {
    print "$1 \L$2\n"; $known{$1} = 1;
  }
  while (/\b(counter|gauge)\(\s*"(sroute_[A-Za-z0-9_:]*)"/g) {
    print "$2 $1\n"; $known{$2} = 1;
  }
  # The helpers pass their parameter `name` on; any other argument is a
  # name this script cannot see.
  while (/(?:->|\.)\s*Declare\(\s*([^"\s)][^,)]*)/g) {
    print "?? $ARGV: Declare($1, ...): not a string literal\n" if $1 ne "name";
  }
  while (/"(sroute_[A-Za-z0-9_:]*)"/g) {
    print "?? $ARGV: \"$1\": a literal not declared as a metric here\n"
      unless $known{$1};
  }
' "${files[@]}" | sort -u)

words() { tr '\n' ' ' <<<"$1" | sed 's/ *$//'; }  # a list on one line
bad=0
if grep -q '^??' <<<"$from_code"; then
  grep '^??' <<<"$from_code" | sed 's/^?? //'
  bad=1
fi
from_code=$(grep -v '^??' <<<"$from_code" || true)
[ -n "$from_code" ] || { echo "found no metric families in the code"; exit 1; }
dup=$(cut -d' ' -f1 <<<"$from_code" | uniq -d)
if [ -n "$dup" ]; then
  echo "declared with two types in the code: $(words "$dup")"
  bad=1
fi

# shellcheck disable=SC2016  # the backquotes are the page's
from_page=$(sed -nE \
  's/^\| *`(sroute_[A-Za-z0-9_:]*)` *\| *([a-z]+) *\|.*/\1 \2/p' "$page" | sort)
dup=$(cut -d' ' -f1 <<<"$from_page" | sort | uniq -d)
[ -z "$dup" ] || { echo "listed twice on the page: $(words "$dup")"; bad=1; }

code_names=$(cut -d' ' -f1 <<<"$from_code" | sort -u)
page_names=$(cut -d' ' -f1 <<<"$from_page" | sort -u)
missing=$(comm -23 <(echo "$code_names") <(echo "$page_names"))
extra=$(comm -13 <(echo "$code_names") <(echo "$page_names"))
if [ -n "$missing" ]; then
  echo "the code exports, but $page does not document: $(words "$missing")"
  bad=1
fi
if [ -n "$extra" ]; then
  echo "$page documents, but the code does not export: $(words "$extra")"
  bad=1
fi
# Types of the families on both.
mistyped=$(join <(echo "$from_code") <(echo "$from_page") |
  awk '$2 != $3 {print $1 " (code: " $2 ", page: " $3 ")"}')
if [ -n "$mistyped" ]; then
  echo "types differ: $(words "$mistyped")"
  bad=1
fi
[ "$bad" = 0 ] &&
  echo "$(wc -l <<<"$code_names") metric families: the code and $page agree"
exit "$bad"
