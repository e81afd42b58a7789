export { ConsumerCore, backoffMs, pause, within, type ConsumerCoreOptions, type ConsumerCounts, type ConsumerErrorEvent, type ConsumerState } from './consumer-core.ts';
export { receiveQueued, settleEvent, type SettleOptions, type SettledOutcome } from './settle-event.ts';
export { DeliveryCore, type Admission, type DeliveryCoreHooks, type DeliveryCoreOptions, type DeliveryPort, type SettledStatus } from './delivery-core.ts';
export { resolveConsumerHandler, type ConsumerHandler } from './consumer-handler.ts';
