#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# docs/dev/layout.md names the tree as it is: every top-level folder of the
# repository, every stage kind's folder under stages/, every compiled-in
# control app under controller/apps/ and every folder of tools/ and
# examples/, and names no folder that is gone. (Its list went stale once.)
# And no source file grows past 1 000 lines without saying why at its top.
# usage: layout_test.sh SOURCE_DIR
set -euo pipefail
src=$1
page=$src/docs/dev/layout.md
# The page's folder block: the first ``` block.
block=$(awk '/^```/ {n++; next} n == 1' "$page")
bad=0
say() { echo "layout.md: $*"; bad=1; }

# Top level: "NAME/" at the start of a line of the block.
listed=$(grep -oE '^[a-z][a-z_]*/' <<<"$block" | tr -d / | sort -u)
present=$(cd "$src" && git ls-files 2>/dev/null | grep / | cut -d/ -f1 |
  grep -vE '^\.' | sort -u)
[ -n "$present" ] || present=$(cd "$src" && find . -mindepth 1 -maxdepth 1 \
  -type d ! -name '.*' ! -name 'build*' -printf '%f\n' | sort)
for d in $(comm -13 <(echo "$listed") <(echo "$present")); do
  say "folder $d/ is not listed"
done
for d in $(comm -23 <(echo "$listed") <(echo "$present")); do
  say "lists $d/, which is not in the tree"
done

# Within an entry (its line and the indented lines after it), every
# subfolder of `parent` must be named as "NAME/", and every file stem of
# controller/apps as its name.
entry() {  # PARENT: the text of the block's entry for PARENT/
  awk -v p="$1/" 'index($0, p) == 1 {on = 1; print; next}
      on && /^[a-z]/ {on = 0} on' <<<"$block"
}
for parent in stages tools examples; do
  text=$(entry "$parent")
  for d in $(cd "$src/$parent" && find . -mindepth 1 -maxdepth 1 -type d \
      -printf '%f\n' | sort); do
    grep -qE "(^|[ (,])$d/" <<<"$text" || say "$parent/$d/ is not named in the $parent/ entry"
  done
done
apps=$(entry controller)
for h in "$src"/controller/apps/*.h; do
  app=$(basename "$h" .h)
  grep -qw "$app" <<<"$apps" || say "controller/apps/$app is not named in the controller/ entry"
done

# No source file over 1 000 lines without a reason at its top: a line
# "// Over 1 000 lines: WHY" among its first five.
while IFS= read -r f; do
  lines=$(wc -l <"$src/$f")
  [ "$lines" -le 1000 ] && continue
  head -5 "$src/$f" | grep -q '^// Over 1 000 lines: ' ||
    { echo "$f: $lines lines and no '// Over 1 000 lines: WHY' at its top"; bad=1; }
done < <(cd "$src" && git ls-files '*.cc' '*.h' '*.c' 2>/dev/null ||
  find . -name '*.cc' -o -name '*.h' -o -name '*.c' | grep -v '^./build' | sed 's|^./||')
[ "$bad" = 0 ] && echo "layout.md: every folder of the tree, and no other; no source file over 1 000 lines without its reason"
exit "$bad"
