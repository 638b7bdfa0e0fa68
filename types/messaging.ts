/**
 * Messages and sends: the shapes the API, the send workflow, its activities and the providers
 * exchange. Like everything in types/, it imports nothing of ours, so the workflow bundle may use it.
 */

export const MESSAGE_TYPES = ['text', 'image', 'video', 'audio', 'document', 'template'] as const;
export type MessageType = (typeof MESSAGE_TYPES)[number];

/** The message types that carry a file by URL (`mediaUrl`). */
export const MEDIA_TYPES = ['image', 'video', 'audio', 'document'] as const satisfies readonly MessageType[];
export type MediaType = (typeof MEDIA_TYPES)[number];

export function isMediaType(type: string): type is MediaType {
  return (MEDIA_TYPES as readonly string[]).includes(type);
}

/** A message's content, as the API accepts it and the providers send it. */
export interface MessageContent {
  type: MessageType;
  text?: string;
  mediaUrl?: string;
  caption?: string;
  fileName?: string;
  templateName?: string;
  templateLanguage?: string;
  templateVariables?: string[];
  /** A template's header parameter: `text` for a text header with a variable, `mediaUrl` for an image, video or document header. */
  templateHeader?: TemplateHeader;
  /** The variable suffix of each URL button of a template that has one, by the button's position in the template. */
  templateButtons?: TemplateButton[];
  /**
   * Instagram: a person's reply from the panel past the 24-hour window, which Instagram takes for 7
   * days with the HUMAN_AGENT tag. Set by the panel route only (the API never takes it).
   */
  humanAgent?: boolean;
}

/** Exactly one of `text` and `mediaUrl` (the API refuses both or neither). */
export interface TemplateHeader {
  text?: string;
  mediaUrl?: string;
}

export interface TemplateButton {
  /** The button's position among the template's buttons (0-based, as the Cloud API counts them). */
  index: number;
  urlVariable: string;
}

/** One parameter of a template component, at the Cloud API's wire format. */
export type TemplateWireParameter =
  | { type: 'text'; text: string }
  | { type: 'image'; image: { link: string } }
  | { type: 'video'; video: { link: string } }
  | { type: 'document'; document: { link: string } };

/**
 * One `template.components[]` entry of a Cloud API send: `header`, `body`, or a URL `button`
 * (`sub_type: 'url'`, `index` a string, as the Graph API takes it). Built by the send rules
 * (domain/messaging/sending.ts templateComponents) from the template and the message.
 */
export type TemplateWireComponent =
  | { type: 'header' | 'body'; parameters: TemplateWireParameter[] }
  | { type: 'button'; sub_type: 'url'; index: string; parameters: { type: 'text'; text: string }[] };

/**
 * Where a send goes and what it says, as the API (or an automation's send_message action) asked.
 * Kept in the database (send_requests), never in the send workflow's history: an operator who
 * can read Temporal reads ids, not messages (domain/messaging/send-requests.ts).
 */
export interface SendRequest {
  /** Cold send: a phone number, found or created; conversation send: an existing conversation. */
  phone?: string;
  instanceId?: string;
  conversationId?: string;
  message: MessageContent;
}

export interface SendInput {
  workspaceId: string;
  /** The send_requests row the activities load the recipient and content from. */
  requestId?: string;
  /** What the workflow needs to order its steps, without the content: the endpoint, and whether a file is attached. */
  kind?: 'cold' | 'conversation';
  hasMedia?: boolean;
  /**
   * Sends started before requestId existed carry the request inline; their histories replay with
   * it, so the workflow and the activities still read it. Remove once none can be running.
   */
  phone?: string;
  instanceId?: string;
  conversationId?: string;
  message?: MessageContent;
  /**
   * How long a send whose provider call may have happened (the worker died mid-call, or the call
   * got no answer) waits for the provider's status callback before it counts as not accepted and
   * is sent again. Set by the API from `SEND_RECONCILE_WINDOW_MS`; absent: DEFAULT_RECONCILE_WINDOW_MS.
   */
  reconcileWindowMs?: number;
  /**
   * A send the API began itself (api/send.ts) and hands over: the reference it prepared and
   * attempted under (the run goes on under it, so nothing is prepared or sent twice), and what its
   * one step came to, if it finished (the run goes on from it as from its own sendAtOnce).
   */
  reference?: string;
  first?: SendAtOnce;
}

/** Default reconciliation window (see SendInput.reconcileWindowMs). */
export const DEFAULT_RECONCILE_WINDOW_MS = 5 * 60 * 1000;

export interface PreparedSend {
  /** `<workflowId>/<runId>`: names the preparation (send_preparations) and the provider attempt. */
  reference: string;
  workspaceId: string;
  instanceId: string;
  contactId: string;
  conversationId: string;
  /** Recipient as the provider knows it. */
  to: string;
  /** Null for a contact met on Instagram. */
  phone: string | null;
  createdContact: boolean;
  createdConversation: boolean;
  /** The Sao Paulo day whose counters were taken. */
  day: string;
  tookCold: boolean;
}

/** What a provider answers a send it accepted. */
export interface SentMessage {
  providerMessageId: string;
  /** The provider's authoritative identity of the recipient (Cloud API `contacts[].wa_id`). */
  waId?: string;
}

/**
 * What one provider-send activity found out. `unconfirmed`: an attempt claimed this send and may
 * have reached the provider (it died mid-call, or the call got no answer); nothing was sent now,
 * and the workflow waits for the provider's status callback (reconcileSend) before deciding.
 */
export type ProviderSendResult = { outcome: 'sent'; sent: SentMessage } | { outcome: 'unconfirmed'; reason: string };

/**
 * What a send's one local step came to (sendAtOnce, workflows/send-message.ts), always with its
 * preparation: the send recorded; accepted but not recorded; unconfirmed (the provider may have
 * it); or the provider call's failure (an activity failure's fields), which the workflow goes on from.
 */
export type SendAtOnce = { prepared: PreparedSend } & (
  | { recorded: SendOutcome }
  | { sent: SentMessage }
  | { unconfirmed: string }
  | { failure: { type?: string; message: string; nonRetryable: boolean; details?: unknown[] } }
);

/** What reconcileSend decided: the provider's answer arrived (`sent`), or the window passed without it (`failed`). */
export type ReconcileResult = { outcome: 'sent'; sent: SentMessage } | { outcome: 'failed'; reason: string };

/** The 201 body of a send (`created` only for the cold send). */
export interface SendOutcome {
  id: string;
  status: 'sent';
  type: MessageType;
  conversationId: string;
  contactId: string;
  created?: { contact: boolean; conversation: boolean };
}

/**
 * A send the rules refused (window closed, opted out, quota, template, ...): the workflow completes
 * with the refusal (the API answers its code), so Temporal's FAILED means something went wrong.
 */
export interface SendRefusal {
  refused: { code: string; message: string; hint?: string };
}

/** What a send workflow returns. */
export type SendResult = SendOutcome | SendRefusal;

export function isRefusal(result: SendResult): result is SendRefusal {
  return 'refused' in result;
}

/** Failure type of a provider error worth retrying (throttled, down); the workflow turns it into SEND_FAILED once retries are spent. */
export const PROVIDER_RETRYABLE = 'PROVIDER_UNAVAILABLE';

/**
 * Failure type (and API error code) of a send the provider may have accepted: never sent twice,
 * and its Idempotency-Key keeps answering it. The activities and the workflow both raise it.
 */
export const SEND_OUTCOME_UNKNOWN = 'SEND_OUTCOME_UNKNOWN';
export const OUTCOME_UNKNOWN_HINT =
  'Whether the provider accepted it is unknown: check the conversation (GET /api/v1/conversations/{id}) before sending it again under a new Idempotency-Key.';

/** The words of a SEND_OUTCOME_UNKNOWN failure, wherever it is raised. */
export function outcomeUnknownMessage(reason: string): string {
  return `${reason}; it is not sent twice`;
}
