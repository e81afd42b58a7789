import { randomBytes } from 'node:crypto';
import type { Command } from '../command.ts';

/** Random bytes in a generated secret: 256 bits, as HMAC-SHA256 keys should be. */
const SECRET_BYTES = 32;

export const secretCommand: Command = {
  name: 'secret',
  summary: 'print a fresh webhook signing secret (whsec_..., Standard Webhooks)',
  help: `Usage: txbox secret

Prints a new random signing secret in the Standard Webhooks format:
"whsec_" followed by ${SECRET_BYTES} random bytes in base64. Give the same secret to the
relay (--secret or TXBOX_WEBHOOK_SECRET) and to the receiver that verifies
the webhook-signature header. Needs no database; prints nothing else.`,
  options: {},
  async run({ out }) {
    out(`whsec_${randomBytes(SECRET_BYTES).toString('base64')}`);
    return 0;
  },
};
