import { iso } from './time';

export interface InsightRow {
  interest: string | null;
  products: unknown;
  objections: unknown;
  next_step: string | null;
  qualification: unknown;
  summary: string | null;
  updated_at: Date | string;
}

/** A contact's AI sales insight as the API exposes it. */
export function serializeInsight(row: InsightRow) {
  return {
    interest: row.interest,
    products: row.products,
    objections: row.objections,
    nextStep: row.next_step,
    qualification: row.qualification,
    summary: row.summary,
    updatedAt: iso(row.updated_at),
  };
}
