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
  const bytes = Buffer.from(randomBytes16());
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
    counter = bytes[6]! & 0x07; // random start keeps room for increments
  }
  bytes.writeUIntBE(ms, 0, 6);
  bytes[6] = 0x70 | ((counter >> 8) & 0x0f);
  bytes[7] = counter & 0xff;
  bytes[8] = 0x80 | (bytes[8]! & 0x3f);
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function isUuid(value: string): boolean {
  return UUID_RE.test(value);
}
