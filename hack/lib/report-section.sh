# Replaces the section NAME of bench/REPORT.md (between its BEGIN/END
# markers) with the content of FILE, or appends it. Each benchmark script
# owns one section, so they can run independently.
#   replace_report_section NAME FILE
replace_report_section() {
  local name="$1" content="$2" report="bench/REPORT.md"
  local begin="<!-- BEGIN $name -->" end="<!-- END $name -->"
  mkdir -p bench
  [[ -f "$report" ]] || printf '# Benchmark reports\n\nEach section is written by the script it names.\n' > "$report"
  if grep -qF "$begin" "$report"; then
    awk -v b="$begin" -v e="$end" -v f="$content" '
      $0 == b { print; while ((getline line < f) > 0) print line; skip = 1; next }
      $0 == e { skip = 0 }
      !skip { print }' "$report" > "$report.tmp"
    mv "$report.tmp" "$report"
  else
    { echo; echo "$begin"; cat "$content"; echo "$end"; } >> "$report"
  fi
}

# The value of key NAME in one JSON line (a string's quotes dropped): what
# the benchmarks print, read back into their report tables.
#   json_field NAME LINE
json_field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^\"]*\)\"\{0,1\}[,}].*/\1/p" <<<"$2"; }
