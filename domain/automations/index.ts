export * from './automation-receiver';
export * from './automation-runs';
export * from './automation-triggers';
export * from './automations';
