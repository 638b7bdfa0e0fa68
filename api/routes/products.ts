import type { AnyRoute } from '../route';

// Filled in by issue 3.
export const productRoutes: AnyRoute[] = [];
