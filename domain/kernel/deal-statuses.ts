/**
 * A deal's status, in the spec's words. It lives in the kernel because two areas filter by it: sales
 * owns deals, and the lead list (leads) filters leads by their deals' status.
 */
export const DEAL_STATUSES = ['open', 'won', 'lost'] as const;
export type DealStatus = (typeof DEAL_STATUSES)[number];
