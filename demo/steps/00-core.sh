# astra-core: the JSONL contract and the embedded model.
# Write the documented example of every record kind and validate each against its schema.
mkdir -p "$OUT/examples"
for kind in $(python -c "from astra_core import KINDS; print(' '.join(KINDS))"); do
  python -c "import json; from astra_core.formats_doc import example; print(json.dumps(example('$kind')))" \
    | astra-core validate "$kind" > "$OUT/examples/$kind.jsonl"
done
# Datasets often ship compressed: a stage reads gzip/bzip2/xz as is (told by the bytes) and writes FILE.gz.
gzip -c "$OUT/examples/trajectory.jsonl" > "$OUT/examples/trajectory.jsonl.gz"
astra-core validate trajectory "$OUT/examples/trajectory.jsonl.gz" -o "$OUT/examples/trajectory.checked.jsonl.gz"
echo "  gzip in, gzip out: $(zcat "$OUT/examples/trajectory.checked.jsonl.gz" | python -c "import json, sys; print(*(r['id'] + ': ' + str(len(r['messages'])) + ' messages' for r in map(json.loads, sys.stdin)))")"
# Ask the embedded model for a tool call (tool_choice=required: schema-guided decoding).
curl -sf "$ASTRA_LLM_BASE_URL/chat/completions" -H 'Content-Type: application/json' -d '{
  "messages": [{"role": "user", "content": "What is the weather in Oslo?"}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
  "tool_choice": "required", "temperature": 0}' > "$OUT/tool_call_reply.json"
python -c "import json; m=json.load(open('$OUT/tool_call_reply.json'))['choices'][0]['message']; print('model tool call:', m['tool_calls'][0]['function'])"
# A batch scheduler's time limit (SIGTERM) stops a stage as Ctrl-C does: what it wrote stays, its counts and
# what is left go to stderr, exit 143 (here: a stage reading a pipe whose writer is still open).
T="$OUT/examples/sigterm"
rm -rf "$T" && mkdir -p "$T" && mkfifo "$T/in"
astra-core validate trajectory "$T/in" -o "$T/out.jsonl" 2> "$T/stderr.txt" & stage=$!
exec 3> "$T/in"
cat "$OUT/examples/trajectory.jsonl" >&3
until [ -s "$T/out.jsonl" ] || ! kill -0 "$stage" 2> /dev/null; do sleep 0.1; done
# While it runs, it holds its output: a second run given the same file (shards with one -o) stops at once.
if astra-core validate trajectory "$OUT/examples/trajectory.jsonl" -o "$T/out.jsonl" 2> "$T/second.txt"; then
  echo "expected the second run to be refused"; exit 1
fi
echo "  $(cat "$T/second.txt")"
kill -TERM "$stage"; status=0; wait "$stage" || status=$?
exec 3>&-
[ "$status" = 143 ] || { cat "$T/stderr.txt"; echo "expected exit 143 after SIGTERM, got $status"; exit 1; }
echo "  SIGTERM mid-run: exit $status, $(grep -o 'wrote [0-9]* from [0-9]*' "$T/stderr.txt"); $(grep -o 'terminated (SIGTERM): [0-9]* read records\? not finished' "$T/stderr.txt")"
# A stage never writes over one of its inputs (the file would be empty before a line is read).
if astra-core validate trajectory "$OUT/examples/trajectory.jsonl" -o "$OUT/examples/trajectory.jsonl" 2> "$T/same.txt"; then
  echo "expected writing over the input to be refused"; exit 1
fi
echo "  $(cat "$T/same.txt"); $(wc -l < "$OUT/examples/trajectory.jsonl") record(s) still in it"
# A download cut off: the lines before the break are validated, the rest is one line naming where it breaks (with
# --skip-bad, one reject with that reason), never a traceback.
python -c "
import json; from astra_core.formats_doc import example
for i in range(200): print(json.dumps(dict(example('trajectory'), id=f'cut-{i}')))" | gzip > "$T/whole.jsonl.gz"
head -c $(( $(stat -c %s "$T/whole.jsonl.gz") - 100 )) "$T/whole.jsonl.gz" > "$T/cut.jsonl.gz"
if astra-core validate trajectory "$T/cut.jsonl.gz" -o "$T/cut.checked.jsonl" 2> "$T/cut.txt"; then
  echo "expected the cut file to stop the stage"; exit 1
fi
echo "  $(tail -n 1 "$T/cut.txt")"
astra-core validate trajectory "$T/cut.jsonl.gz" -o "$T/cut.checked.jsonl" --skip-bad --rejects "$T/cut.rejects.jsonl" \
  2> /dev/null || [ $? = 1 ]  # (validate exits 1 when it rejects anything)
echo "  with --skip-bad: $(wc -l < "$T/cut.checked.jsonl") records validated, $(wc -l < "$T/cut.rejects.jsonl") reject for the rest"
rm "$T/whole.jsonl.gz" "$T/cut.jsonl.gz"  # (not a demo output: the report of step 95 shows every file here)
