/**
 * The bucket of a key as PostgreSQL computes it (`hashtext(key) & 255`, the
 * outbox's generated `bucket` column), from the key's bytes in the server
 * encoding. Used by the WAL wake mode to wake only the lane (and the relay)
 * that leases the bucket of a committed row; the bucket column itself is not
 * in the WAL stream (PostgreSQL 15 does not publish generated columns).
 *
 * `hashtext` is `hash_bytes` of PostgreSQL's src/common/hashfn.c (Bob Jenkins'
 * lookup3 over 4-byte little-endian words) for a deterministic collation. A
 * big-endian server reads the words the other way: the WAL wake checks this
 * function against the server's `hashtext` before trusting it
 * (`postgres-wal-wake.ts`), and wakes every lane when they differ.
 */

const rot = (x: number, k: number): number => (x << k) | (x >>> (32 - k));

function word(k: Uint8Array, i: number): number {
  return k[i]! | (k[i + 1]! << 8) | (k[i + 2]! << 16) | (k[i + 3]! << 24);
}

/** PostgreSQL's `hash_bytes` on a little-endian server, as an unsigned 32-bit number. */
export function pgHashBytes(k: Uint8Array, start = 0, end = k.length): number {
  let len = end - start;
  let a = (0x9e3779b9 + len + 3923095) | 0;
  let b = a;
  let c = a;
  let i = start;
  while (len >= 12) {
    a = (a + word(k, i)) | 0;
    b = (b + word(k, i + 4)) | 0;
    c = (c + word(k, i + 8)) | 0;
    // mix(a, b, c)
    a = (a - c) | 0; a ^= rot(c, 4); c = (c + b) | 0;
    b = (b - a) | 0; b ^= rot(a, 6); a = (a + c) | 0;
    c = (c - b) | 0; c ^= rot(b, 8); b = (b + a) | 0;
    a = (a - c) | 0; a ^= rot(c, 16); c = (c + b) | 0;
    b = (b - a) | 0; b ^= rot(a, 19); a = (a + c) | 0;
    c = (c - b) | 0; c ^= rot(b, 4); b = (b + a) | 0;
    i += 12;
    len -= 12;
  }
  // The last 11 bytes; the lowest byte of c is reserved for the length.
  // (The C code's switch with fall-through, one byte per case.)
  if (len >= 11) c = (c + (k[i + 10]! << 24)) | 0;
  if (len >= 10) c = (c + (k[i + 9]! << 16)) | 0;
  if (len >= 9) c = (c + (k[i + 8]! << 8)) | 0;
  if (len >= 8) b = (b + (k[i + 7]! << 24)) | 0;
  if (len >= 7) b = (b + (k[i + 6]! << 16)) | 0;
  if (len >= 6) b = (b + (k[i + 5]! << 8)) | 0;
  if (len >= 5) b = (b + k[i + 4]!) | 0;
  if (len >= 4) a = (a + (k[i + 3]! << 24)) | 0;
  if (len >= 3) a = (a + (k[i + 2]! << 16)) | 0;
  if (len >= 2) a = (a + (k[i + 1]! << 8)) | 0;
  if (len >= 1) a = (a + k[i]!) | 0;
  // final(a, b, c)
  c ^= b; c = (c - rot(b, 14)) | 0;
  a ^= c; a = (a - rot(c, 11)) | 0;
  b ^= a; b = (b - rot(a, 25)) | 0;
  c ^= b; c = (c - rot(b, 16)) | 0;
  a ^= c; a = (a - rot(c, 4)) | 0;
  b ^= a; b = (b - rot(a, 14)) | 0;
  c ^= b; c = (c - rot(b, 24)) | 0;
  return c >>> 0;
}

/** `hashtext(key) & 255` for a key given as its UTF-8 bytes (a UTF-8 server). */
export function bucketOfKeyBytes(key: Uint8Array, start = 0, end = key.length): number {
  return pgHashBytes(key, start, end) & 255;
}
