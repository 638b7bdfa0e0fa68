/** Shapes exchanged between the API, the send workflow and its activities (types only: safe in the workflow bundle). */
import type { MessageType } from '../activities/providers/types';

export interface SendMessageContent {
  type: MessageType;
  text?: string;
  mediaUrl?: string;
  caption?: string;
  fileName?: string;
  templateName?: string;
  templateLanguage?: string;
  templateVariables?: string[];
}

export interface SendInput {
  workspaceId: string;
  /** Cold send: a phone number, found or created; conversation send: an existing conversation. */
  phone?: string;
  instanceId?: string;
  conversationId?: string;
  message: SendMessageContent;
}

export interface PreparedSend {
  workspaceId: string;
  instanceId: string;
  contactId: string;
  conversationId: string;
  /** Recipient as the provider knows it. */
  to: string;
  phone: string;
  createdContact: boolean;
  createdConversation: boolean;
  /** The Sao Paulo day whose counters were taken. */
  day: string;
  tookCold: boolean;
}

export interface SentMessage {
  providerMessageId: string;
  waId?: string;
}

/** The 201 body of CONTRACT.md (`created` only for the cold send). */
export interface SendOutcome {
  id: string;
  status: 'sent';
  type: MessageType;
  conversationId: string;
  contactId: string;
  created?: { contact: boolean; conversation: boolean };
}
