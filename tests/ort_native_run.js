// Runs an ONNX model with ONNX Runtime's native inference build (npm onnxruntime-node), as an
// independent executor of edgetrain's training graphs. Usage:
//   node ort_native_run.js MODEL.onnx MANIFEST.json OUT_DIR
// MANIFEST lists the feeds: [{"name", "dtype" ("float32"|"int64"), "shape", "file" (raw little-endian)}].
// Each output is written as OUT_DIR/<index>.bin with OUT_DIR/outputs.json describing them.
const fs = require('fs');
const path = require('path');
const ort = require(process.env.ORT_NODE_MODULE || 'onnxruntime-node');

const [modelPath, manifestPath, outDir] = process.argv.slice(2);
const arrays = {float32: Float32Array, int64: BigInt64Array, int32: Int32Array, bool: Uint8Array};

(async () => {
  const session = await ort.InferenceSession.create(modelPath);
  const feeds = {};
  for (const feed of JSON.parse(fs.readFileSync(manifestPath, 'utf8'))) {
    const bytes = fs.readFileSync(feed.file);
    const data = new arrays[feed.dtype](bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
    feeds[feed.name] = new ort.Tensor(feed.dtype, data, feed.shape);
  }
  const results = await session.run(feeds);
  const described = [];
  session.outputNames.forEach((name, index) => {
    const t = results[name];
    const file = path.join(outDir, `${index}.bin`);
    fs.writeFileSync(file, Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    described.push({name, dtype: t.type, shape: t.dims, file});
  });
  fs.writeFileSync(path.join(outDir, 'outputs.json'), JSON.stringify(described));
})().catch((e) => {
  console.error(`onnxruntime-node: ${e.message}`);
  process.exit(1);
});
