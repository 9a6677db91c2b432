// ONNX Runtime's CPU side of bench/run_ort_compare.py: one model, one input, W warm-up passes
// then N timed passes in this process; prints one JSON object on stdout (with the process's VmRSS
// before the InferenceSession is made, and its VmHWM and VmRSS at the end).
//
//   node bench/ort/run_ort.mjs --ort-dir ~/.cache/memoplan/ort-node --model M.onnx \
//     --input in.bin --shape 1x3x224x224 --dtype float32 --threads 1 --warmup 2 --iters 5 \
//     [--output out.bin]
//
// --serve 1 (bench/ort_bursts.py): after the warm-up, bursts on request instead of --iters: each
// line N > 0 on stdin runs one untimed and N timed passes and prints {"pass_ms": [...]} on a
// line of its own; 0 or the end of stdin ends it. --output is written after the first burst.
//
// --input is raw little-endian data (float32 or int64) that the Python side wrote, so both sides
// run the same input; --output receives the first output as raw float32 for the accuracy check.
// --ort-dir is where onnxruntime-node is installed (npm install --ignore-scripts of
// bench/ort/package.json): ESM imports resolve from this file's directory, so it is loaded with a
// require() rooted there. Session: every graph optimization, memory pattern and CPU arena on,
// sequential execution, --threads intra-op threads and one inter-op thread.
import { createRequire } from 'node:module';
import { readFileSync, readSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';

function parseArgs(argv) {
  const args = { warmup: 2, iters: 10, threads: 1, dtype: 'float32', serve: 0 };
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || i + 1 >= argv.length) {
      throw new Error(`bad argument '${argv[i]}' (expected --name value pairs)`);
    }
    args[argv[i].slice(2).replace(/-/g, '_')] = argv[i + 1];
  }
  for (const key of ['ort_dir', 'model', 'input', 'shape']) {
    if (!args[key]) throw new Error(`--${key.replace(/_/g, '-')} is required`);
  }
  for (const key of ['warmup', 'iters', 'threads', 'serve']) args[key] = Number(args[key]);
  return args;
}

function readInput(path, dtype, dims) {
  const bytes = readFileSync(path);
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  const data = dtype === 'int64' ? new BigInt64Array(buffer) : new Float32Array(buffer);
  const count = dims.reduce((a, b) => a * b, 1);
  if (data.length !== count) {
    throw new Error(`${path}: ${data.length} ${dtype} values for shape ${dims.join('x')}`);
  }
  return data;
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

function writeOutput(session, outputs, path) {
  const values = Float32Array.from(outputs[session.outputNames[0]].data, Number);
  writeFileSync(path, Buffer.from(values.buffer));
}

// N passes, each timed on its own: the last outputs and the milliseconds of each.
async function timedPasses(session, feeds, n) {
  let outputs;
  const passMs = [];
  for (let i = 0; i < n; i++) {
    const start = process.hrtime.bigint();
    outputs = await session.run(feeds);
    passMs.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  return { outputs, passMs };
}

// One line of stdin, blocking (the caller waits for each burst's answer anyway); what was read
// before the end of stdin at its end.
function readLine() {
  const byte = Buffer.alloc(1);
  let line = '';
  while (readSync(0, byte, 0, 1) === 1 && byte[0] !== 10) line += String.fromCharCode(byte[0]);
  return line;
}

async function serve(session, feeds, args) {
  for (let burst = 0; ; burst++) {
    const n = Number(readLine().trim());
    if (!(n > 0)) return;
    await session.run(feeds);
    const { outputs, passMs } = await timedPasses(session, feeds, n);
    if (burst === 0 && args.output) writeOutput(session, outputs, args.output);
    writeSync(1, JSON.stringify({ pass_ms: passMs }) + '\n');
  }
}

// A /proc/self/status field in bytes (VmRSS, VmHWM).
function statusBytes(field) {
  const line = readFileSync('/proc/self/status', 'utf8').split('\n')
    .find((l) => l.startsWith(field + ':'));
  return line ? Number(line.split(/\s+/)[1]) * 1024 : 0;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const ort = createRequire(join(args.ort_dir, 'package.json'))('onnxruntime-node');
  const rssBeforeSession = statusBytes('VmRSS');  // node and the ORT library, before the model
  const dims = args.shape.split('x').map(Number);
  const loadStart = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(args.model, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    enableMemPattern: true,
    enableCpuMemArena: true,
    executionMode: 'sequential',
    intraOpNumThreads: args.threads,
    interOpNumThreads: 1,
  });
  const loadMs = Number(process.hrtime.bigint() - loadStart) / 1e6;
  const feeds = {
    [session.inputNames[0]]: new ort.Tensor(args.dtype, readInput(args.input, args.dtype, dims),
                                            dims),
  };
  let outputs;
  for (let i = 0; i < args.warmup; i++) outputs = await session.run(feeds);
  if (args.serve) {
    await serve(session, feeds, args);
    return;
  }
  const timed = await timedPasses(session, feeds, args.iters);
  const passMs = timed.passMs;
  if (timed.outputs) outputs = timed.outputs;  // --iters 0: the warm-up's
  const first = outputs[session.outputNames[0]];
  if (args.output) writeOutput(session, outputs, args.output);
  console.log(JSON.stringify({
    ort_version: ort.env.versions.node,
    model: args.model,
    input: args.shape,
    dtype: args.dtype,
    intra_op_threads: args.threads,
    warmup: args.warmup,
    iters: args.iters,
    load_ms: loadMs,
    median_ms: median(passMs),
    pass_ms: passMs,
    output_name: session.outputNames[0],
    output_shape: first.dims,
    output_dtype: first.type,
    rss_before_session_bytes: rssBeforeSession,
    peak_rss_bytes: statusBytes('VmHWM'),
    rss_bytes: statusBytes('VmRSS'),
  }));
}

main().catch((error) => {
  console.error(`run_ort: error: ${error.message}`);
  process.exit(1);
});
