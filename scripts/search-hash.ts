/**
 * What to type in the Temporal UI to find a workspace's sends to one number: Temporal shows the
 * recipient only as a keyed hash (`PhoneHash`, domain/platform/temporal.ts searchHash), which only the
 * holder of ENCRYPTION_KEYS can compute.
 *
 *   npx tsx scripts/search-hash.ts <workspaceId> <phone in any form>
 *
 * Reads ENCRYPTION_KEYS from the environment, else `.data/encryption-keys` (what `npm start`
 * generated). Prints the visibility query, with one hash per listed key (a rotation changes it).
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseKeyRing, searchHashes } from '../domain/platform';
import { parsePhone } from '../domain/leads';

export function searchQuery(keys: string, workspaceId: string, value: string): string {
  const ring = parseKeyRing(keys);
  const quoted = (list: string[]) => list.map((h) => `"${h}"`).join(', ');
  const parsed = parsePhone(value);
  if (!parsed.ok) throw new Error(`Not a phone number: ${parsed.reason}`);
  return `WorkspaceId = "${workspaceId}" AND PhoneHash IN (${quoted(searchHashes(ring, 'phone', workspaceId, parsed.phone.e164))})`;
}

function main(args: string[]): number {
  const [workspaceId, ...rest] = args;
  const value = rest.join(' ');
  if (!workspaceId || !value) {
    console.error('usage: search-hash.ts <workspaceId> <phone>');
    return 2;
  }
  const file = path.join(process.cwd(), '.data', 'encryption-keys');
  const keys = process.env.ENCRYPTION_KEYS ?? (fs.existsSync(file) ? fs.readFileSync(file, 'utf8').trim() : '');
  if (!keys) {
    console.error('ENCRYPTION_KEYS is not set and .data/encryption-keys does not exist');
    return 2;
  }
  console.log(searchQuery(keys, workspaceId, value));
  return 0;
}

if (require.main === module) process.exit(main(process.argv.slice(2)));
