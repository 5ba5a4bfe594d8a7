# astra-core view: every record the demo wrote (of every kind, kept and rejected, with their reasons) in one
# self-contained HTML page: an index to filter and sort, transcripts, environments, plans, eval items, compare.
mapfile -d '' demo_jsonl < <(find "$OUT" -name '*.jsonl' -type f -print0 | sort -z)
if [ "${#demo_jsonl[@]}" -gt 0 ]; then
  astra-core view "${demo_jsonl[@]}" --title "ASTRA demo records" -o "$OUT/report.html"
  echo "report: $OUT/report.html (open it in a browser; for large files: astra-core view FILES --serve)"
else
  echo "no JSONL outputs in $OUT to view"
fi
