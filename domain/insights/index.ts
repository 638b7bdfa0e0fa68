export { deriveInsight, type DerivationOutcome, InsightNotDerived, type ModelDefaults, type ModelPort, TRANSCRIPT_BOUNDS } from './derive';
export { derivedInsightSchema, maskPersonalData, RESPONSE_FORMAT, TEMPERATURES } from './model';
