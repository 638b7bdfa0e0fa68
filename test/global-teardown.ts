export default async function globalTeardown(): Promise<void> {
  const running = globalThis.__TEST_STACK__ ?? [];
  for (const part of [...running].reverse()) await part.stop().catch((err: Error) => console.error(`teardown: ${err.message}`));
}
