# astra-core view: every record the demo wrote (of every kind, kept and rejected, with their reasons; gzip too) in one
# self-contained HTML page: an index to filter and sort, transcripts, environments, plans, eval items, compare.
mapfile -d '' demo_jsonl < <(cd "$OUT" && find . \( -name '*.jsonl' -o -name '*.jsonl.gz' \) -type f -printf '%P\0' | sort -z)
if [ "${#demo_jsonl[@]}" -gt 0 ]; then
  (cd "$OUT" && astra-core view "${demo_jsonl[@]}" --title "ASTRA demo records" -o report.html)
  echo "report: $OUT/report.html (open it in a browser; for large files: astra-core view FILES --serve)"
else
  echo "no JSONL outputs in $OUT to view"
fi
