/** The bench worker's workflow bundle: every workflow of the service, and the bench's Temporal floors. */
export * from '../../workflows';
export { floorActivityWorkflow, floorEmptyWorkflow, floorLocalActivityWorkflow } from './floor';
