#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The docs' references to the tree resolve. In README.md and every markdown
# page under docs/:
#  - each backticked path that looks like a file of the repository
#    (`dir/file.cc`; also .h .hpp .c .cpp .proto .sh .py .md, with an
#    optional :LINE or :LINE-LINE) must exist, taken from the repository
#    root or else from the page's own directory, and the line must lie
#    within the file. A path is the repository's when its first part is
#    (a top-level entry, or an entry beside the page) or it starts with
#    ./ or ../: `linux/fuse.h` and `sys/stat.h` are system headers;
#  - each relative link target ([text](path), path#anchor, and reference
#    definitions `[name]: path`) must exist, taken from the page's
#    directory (a leading '/' from the repository root).
# Fenced code blocks are not looked at; URLs and in-page anchors are not
# checked. Fails naming each page, line and reference that does not
# resolve.
# usage: doc_code_refs_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: doc_code_refs_test.sh SOURCE_DIR}
cd "$src"

pages=(README.md)
while IFS= read -r -d '' p; do pages+=("$p"); done \
  < <(find docs -name '*.md' -print0 | sort -z)

# A backticked source path: at least one '/', a known extension, an
# optional :LINE or :LINE-LINE.
code_re='^([A-Za-z0-9_.][A-Za-z0-9_.+-]*(/[A-Za-z0-9_.+-]+)+\.(cc|h|hpp|c|cpp|proto|sh|py|md))(:([0-9]+)(-([0-9]+))?)?$'

# Prints "code<TAB>LINE<TAB>SPAN" for each inline code span and
# "link<TAB>LINE<TAB>TARGET" for each link target of a page, outside
# fenced code blocks.
extract() {
  awk '
    /^ ? ? ?(```|~~~)/ { fence = !fence; next }
    fence { next }
    {
      rest = $0; text = ""
      while (match(rest, /`[^`]+`/)) {
        printf "code\t%d\t%s\n", NR, substr(rest, RSTART + 1, RLENGTH - 2)
        text = text substr(rest, 1, RSTART - 1) " "
        rest = substr(rest, RSTART + RLENGTH)
      }
      text = text rest
      if (match(text, /^ ? ? ?\[[^]]+\]:[ \t]+[^ \t]+/)) {
        def = substr(text, RSTART, RLENGTH)
        sub(/^ ? ? ?\[[^]]+\]:[ \t]+/, "", def)
        printf "link\t%d\t%s\n", NR, def
      }
      rest = text
      while (match(rest, /\]\([^)]*\)/)) {
        printf "link\t%d\t%s\n", NR, substr(rest, RSTART + 2, RLENGTH - 3)
        rest = substr(rest, RSTART + RLENGTH)
      }
    }' "$1"
}

bad=0
broken() {  # PAGE LINE WHAT
  echo "$1:$2: $3"
  bad=1
}

for page in "${pages[@]}"; do
  dir=$(dirname "$page")
  while IFS=$'\t' read -r kind line ref; do
    if [ "$kind" = code ]; then
      [[ $ref =~ $code_re ]] || continue
      path=${BASH_REMATCH[1]}
      top=${path%%/*}
      [[ $top == . || $top == .. || -e $top || -e $dir/$top ]] || continue
      first=${BASH_REMATCH[5]}
      last=${BASH_REMATCH[7]:-${BASH_REMATCH[5]}}
      if [ -f "$path" ]; then
        file=$path
      elif [ -f "$dir/$path" ]; then
        file=$dir/$path
      else
        broken "$page" "$line" "\`$ref\`: no such file"
        continue
      fi
      if [ -n "$first" ]; then
        lines=$(wc -l < "$file")
        if [ "$last" -gt "$lines" ] || [ "$first" -lt 1 ]; then
          broken "$page" "$line" "\`$ref\`: $file has $lines lines"
        fi
      fi
    else
      target=${ref#<}
      target=${target%%>*}
      target=${target%%[[:space:]]*}
      # URLs (scheme:), in-page anchors and empty targets are not files.
      [[ -z $target || $target == '#'* || $target =~ ^[A-Za-z][A-Za-z0-9+.-]*: ]] &&
        continue
      path=${target%%#*}
      path=${path%%\?*}
      [ -n "$path" ] || continue
      if [[ $path == /* ]]; then
        resolved=.$path
      else
        resolved=$dir/$path
      fi
      [ -e "$resolved" ] || broken "$page" "$line" "link ($target): no such file"
    fi
  done < <(extract "$page")
done

# The code's comments point into docs/ too: every docs/... page they name
# is there.
while IFS=: read -r file line ref; do
  [ -e "$ref" ] || broken "$file" "$line" "$ref: no such page"
done < <(git ls-files -- '*.cc' '*.h' '*.proto' '*.sh' '*.c' 'CMakeLists.txt' \
           '*.cmake' '*.in' 2>/dev/null |
         xargs -r grep -noE 'docs/[A-Za-z0-9_./-]+\.(md|[1-8])' || true)

if [ "$bad" -ne 0 ]; then
  echo "broken references to the tree (above)"
  exit 1
fi
echo "${#pages[@]} pages: every code path and link resolves; so does every page the code names"
