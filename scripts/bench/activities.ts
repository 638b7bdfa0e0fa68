/** The bench's activities, registered beside the service's on the bench worker (scripts/bench/worker.ts). */
export const benchActivities = {
  /** Does nothing: the Temporal floor's one activity (scripts/bench/floor.ts). */
  async floorNoop(): Promise<void> {},
};

export type BenchActivities = typeof benchActivities;
