export * from './events';
export * from './outbox';
export * from './webhook-deliveries';
export * from './webhook-signature';
export * from './webhooks';
