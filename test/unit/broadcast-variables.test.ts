/**
 * A broadcast's personalisation (domain/broadcasts personalise, customVariableKeys): which custom
 * field keys its variables use, and what each recipient's variables become.
 */
import { customVariableKeys, personalise } from '../../domain/broadcasts/recipients';

const ana = { name: 'Ana', phone: '+5511987654321', email: 'ana@example.com' };

describe('customVariableKeys', () => {
  it.each([
    [['Olá {{contact.name}}'], []],
    [
      ['{{contact.city}} e {{ contact.city }}', '{{contact.plan_2}}'],
      ['city', 'plan_2'],
    ],
    [['{{contact.phone}} {{contact.email}} {{contact.vip}}'], ['vip']],
    // Not a contact variable: left as written (a key starts with a letter; other namespaces are text).
    [['{{contact.2x}} {{deal.city}} {contact.city}'], []],
  ])('%j uses %j', (variables, keys) => {
    expect(customVariableKeys(variables)).toEqual(keys);
  });
});

describe('personalise', () => {
  it.each<[string[], Record<string, unknown>, string[] | null]>([
    [['Olá {{contact.name}}', '{{contact.email}}'], {}, ['Olá Ana', 'ana@example.com']],
    [['{{contact.phone}}'], {}, ['+5511987654321']],
    [['{{contact.name}} de {{ contact.city }}'], { city: 'Recife' }, ['Ana de Recife']],
    [['{{contact.score}} / {{contact.vip}}'], { score: 9.5, vip: false }, ['9.5 / false']],
    [['{{contact.tags}}'], { tags: ['a', 'b', null] }, ['a, b']],
    [['no variables at all'], {}, ['no variables at all']],
    // Nothing to fill in: the recipient is skipped rather than sent a message with a hole.
    [['Olá {{contact.city}}'], {}, null],
    [['Olá {{contact.city}}'], { city: '  ' }, null],
    [['Olá {{contact.city}}'], { city: null }, null],
    [['Olá {{contact.tags}}'], { tags: [] }, null],
  ])('%j with %j gives %j', (variables, custom, expected) => {
    expect(personalise(variables, ana, custom)).toEqual(expected);
  });

  it('skips a contact without the e-mail a variable asks for', () => {
    expect(personalise(['{{contact.email}}'], { ...ana, email: null })).toBeNull();
  });
});
