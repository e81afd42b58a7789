export { Inbox, createInbox, HoldEvent, type InboxOptions, type InboxEvents, type InboxHandler } from './inbox.ts';
export { InboxTransport } from './inbox-transport.ts';
export { InboxQueue, createInboxWorker, type InboxWorkerOptions, type QueueRefusal } from './inbox-worker.ts';
export { KeyedDispatcher } from './keyed-dispatcher.ts';
export { processUntilSettled } from './process-until-settled.ts';
export * from './consumer/index.ts';
