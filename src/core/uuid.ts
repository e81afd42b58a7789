import { randomFillSync } from 'node:crypto';

const pool = Buffer.alloc(16 * 256);
let poolOffset = pool.length;
let lastMs = -1;
let counter = 0;

function randomBytes16(): Buffer {
  if (poolOffset >= pool.length) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const out = pool.subarray(poolOffset, poolOffset + 16);
  poolOffset += 16;
  return out;
}

/**
 * A UUIDv7 (RFC 9562): 48-bit Unix milliseconds, then a 12-bit counter that
 * keeps ids made in the same millisecond by this process increasing, then
 * random bits.
 *
 * @example
 * uuidv7() // '01932c07-1f2a-7b3c-9d4e-5f6a7b8c9d0e'
 */
export function uuidv7(now: number = Date.now()): string {
  const random = randomBytes16();
  let ms = now;
  if (ms <= lastMs) {
    ms = lastMs;
    counter++;
    if (counter > 0xfff) {
      // Counter exhausted within one millisecond: borrow the next millisecond.
      ms = ++lastMs;
      counter = 0;
    }
  } else {
    lastMs = ms;
    counter = random[6]! & 0x07; // random start keeps room for increments
  }
  // Written from a byte-to-hex table: no Buffer copy and no hex string to slice (enqueue's hot path).
  const high = Math.floor(ms / 0x10000); // the 32 high bits of the 48-bit milliseconds
  const low = ms - high * 0x10000;
  return (
    HEX[high >>> 24]! + HEX[(high >>> 16) & 0xff]! + HEX[(high >>> 8) & 0xff]! + HEX[high & 0xff]! + '-' +
    HEX[low >>> 8]! + HEX[low & 0xff]! + '-' +
    HEX[0x70 | ((counter >> 8) & 0x0f)]! + HEX[counter & 0xff]! + '-' +
    HEX[0x80 | (random[8]! & 0x3f)]! + HEX[random[9]!]! + '-' +
    HEX[random[10]!]! + HEX[random[11]!]! + HEX[random[12]!]! + HEX[random[13]!]! + HEX[random[14]!]! + HEX[random[15]!]!
  );
}

/** Two lowercase hex digits of each byte value. */
const HEX: readonly string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function isUuid(value: string): boolean {
  return UUID_RE.test(value);
}
