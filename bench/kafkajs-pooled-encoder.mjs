/**
 * An experiment, not part of txbox (docs/performance.md, section 6): loaded
 * with `--import` before kafkajs, it swaps kafkajs 2.2.4's Encoder for one that
 * takes the same zero-filled bytes from Node's buffer pool instead of a fresh
 * `Buffer.alloc` per record and per header. Relay workers inherit it through
 * NODE_OPTIONS:
 *
 *   NODE_OPTIONS="--import ./bench/kafkajs-pooled-encoder.mjs" BENCH_TRANSPORTS=kafka BENCH_RELAYS=1,2 \
 *     node --conditions=txbox-source --import tsx bench/transports.ts
 */
import { createRequire } from 'node:module';

const require = createRequire(new URL('../src/transports/kafka/kafka-client.ts', import.meta.url));
const path = require.resolve('kafkajs/src/protocol/encoder.js');
const Encoder = require(path);

/** Same prototype and fields as kafkajs's Encoder; only the allocation differs. */
function PooledEncoder(initialSize = 511) {
  this.buf = Buffer.allocUnsafe(Encoder.nextPowerOfTwo(initialSize)).fill(0);
  this.offset = 0;
}
PooledEncoder.prototype = Encoder.prototype;
Object.setPrototypeOf(PooledEncoder, Encoder);
Encoder.prototype.ensureAvailable = function ensureAvailable(length) {
  if (this.offset + length > this.buf.length) {
    const grown = Buffer.allocUnsafe(Encoder.nextPowerOfTwo(this.offset + length)).fill(0);
    this.buf.copy(grown, 0, 0, this.offset);
    this.buf = grown;
  }
};
require.cache[path].exports = PooledEncoder;
